"""Rescue of running jobs whose worker went silent or whose deadline passed."""

from __future__ import annotations

import logging
from typing import LiteralString

from psycopg_pool import AsyncConnectionPool

from awa.config import INSTANCE_EXPIRY_MS
from awa.db import sql

logger = logging.getLogger("awa")
BATCH = 1_000


Rescued = list[tuple[int, str, str, str]]


async def _rescue(
    pool: AsyncConnectionPool,
    query: LiteralString,
    params: dict[str, int],
    why: str,
    reason: str,
) -> Rescued:
    rescued: Rescued = []
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(query, {**params, "limit": BATCH})
            rows = await cur.fetchall()
        for job_id, queue, kind, state in rows:
            logger.info(
                "rescued job %s (%s on %s) → %s: %s", job_id, kind, queue, state, why,
                extra={"event": "job_rescued", "job_id": job_id, "queue": queue,
                       "kind": kind, "state": state, "reason": reason},
            )  # fmt: skip
        rescued.extend(rows)
        if len(rows) < BATCH:
            return rescued


async def rescue_stale_heartbeats(
    pool: AsyncConnectionPool, staleness_ms: int, epoch: int
) -> Rescued:
    """Running jobs silent for ``staleness_ms`` go back to retryable (or failed); returns them."""
    return await _rescue(
        pool,
        sql.JOB_RESCUE_STALE_HEARTBEAT,
        {"staleness_ms": staleness_ms, "instances_kept_ms": INSTANCE_EXPIRY_MS, "epoch": epoch},
        "stale heartbeat",
        "heartbeat",
    )


async def rescue_past_deadline(pool: AsyncConnectionPool, grace_ms: int, epoch: int) -> Rescued:
    """Running jobs more than ``grace_ms`` past their deadline go back to retryable (or failed)."""
    return await _rescue(
        pool,
        sql.JOB_RESCUE_PAST_DEADLINE,
        {"grace_ms": grace_ms, "epoch": epoch},
        "deadline",
        "deadline",
    )
