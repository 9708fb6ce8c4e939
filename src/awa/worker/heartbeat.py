"""Heartbeats: one batched statement per interval for every attempt this process owns.

An attempt whose row no longer matches (rescued elsewhere, cancelled) has lost its
lease: its handler is told to stop, and its outcome will be fenced anyway.
"""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.worker.completer import Completer
from awa.worker.executor import Executor

logger = logging.getLogger("awa")


async def beat(pool: AsyncConnectionPool, executor: Executor, completer: Completer) -> int:
    """Refresh heartbeats; returns how many attempts had lost their lease."""
    running = executor.in_flight()
    attempts = dict(running)
    attempts.update(completer.attempts())
    if not attempts:
        return 0
    ids = list(attempts)
    leases = [attempts[i] for i in ids]
    async with pool.connection() as conn:
        cur = await conn.execute(sql.JOB_HEARTBEAT_MANY, {"ids": ids, "run_leases": leases})
        alive = {row[0] for row in await cur.fetchall()}
    lost = 0
    for job_id, lease in running:
        if job_id not in alive and executor.cancel(job_id, "lease lost", lease):
            lost += 1
            logger.info(
                "job %s lost its lease (rescued or cancelled); stopping its handler", job_id,
                extra={"event": "lease_lost", "job_id": job_id, "run_lease": lease},
            )  # fmt: skip
    return lost
