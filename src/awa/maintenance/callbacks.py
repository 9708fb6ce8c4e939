"""Timeouts of external callbacks: parked jobs whose callback never came are retried."""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from awa.db import sql

logger = logging.getLogger("awa")
BATCH = 1_000

Rescued = list[tuple[int, str, str, str]]


async def rescue_callback_timeouts(pool: AsyncConnectionPool, epoch: int) -> Rescued:
    """``waiting_external`` jobs past ``callback_timeout_at`` → retryable (failed on their
    last attempt), in batches; returns (id, queue, kind, new state) of each."""
    rescued: Rescued = []
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(
                sql.JOB_RESCUE_CALLBACK_TIMEOUT, {"limit": BATCH, "epoch": epoch}
            )
            rows = await cur.fetchall()
        for job_id, queue, kind, state in rows:
            logger.info(
                "callback of job %s (%s on %s) timed out → %s", job_id, kind, queue, state,
                extra={"event": "job_rescued", "job_id": job_id, "queue": queue, "kind": kind,
                       "state": state, "reason": "callback_timeout"},
            )  # fmt: skip
        rescued.extend(rows)
        if len(rows) < BATCH:
            return rescued
