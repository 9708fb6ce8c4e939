"""Timeouts of external callbacks: parked jobs whose callback never came are retried;
parked jobs whose callback came before they parked are released."""

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


async def release_answered_parked(pool: AsyncConnectionPool, epoch: int) -> int:
    """``waiting_external`` jobs whose callback was answered while their handler still
    ran (so no id is left to answer them) → available, with the payload; how many."""
    released = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(
                sql.JOB_RELEASE_ANSWERED_PARKED, {"limit": BATCH, "epoch": epoch}
            )
            rows = await cur.fetchall()
        for job_id, queue, kind, _, _ in rows:
            logger.info(
                "job %s (%s on %s) parked after its callback was answered → available",
                job_id, kind, queue,
                extra={"event": "parked_job_released", "job_id": job_id, "queue": queue,
                       "kind": kind},
            )  # fmt: skip
        released += len(rows)
        if len(rows) < BATCH:
            return released
