"""Retention, deleted in batches: finished jobs, dead-lettered jobs past their
retention, ended batch operations, silent runtime instances, rate buckets refilled to
their burst and lapsed handoff seats."""

from __future__ import annotations

from typing import Any, LiteralString

from psycopg_pool import AsyncConnectionPool

from awa.config import INSTANCE_EXPIRY_MS
from awa.db import sql

BATCH = 5_000


async def _in_batches(
    pool: AsyncConnectionPool, statement: LiteralString, params: dict[str, Any]
) -> int:
    """Run ``statement`` (which deletes at most ``params["limit"]`` rows, BATCH) until a
    run deletes fewer, each on a connection of its own; returns how many it deleted."""
    total = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(statement, params)
        total += cur.rowcount
        if cur.rowcount < BATCH:
            return total


async def prune_finalized(
    pool: AsyncConnectionPool, completed_retention_ms: int, failed_retention_ms: int, epoch: int
) -> int:
    """Delete finished jobs past their retention; returns how many."""
    params = {
        "completed_retention_ms": completed_retention_ms,
        "failed_retention_ms": failed_retention_ms,
        "limit": BATCH,
        "epoch": epoch,
    }
    return await _in_batches(pool, sql.JOB_PRUNE_FINALIZED, params)


async def prune_runtime_instances(pool: AsyncConnectionPool, epoch: int) -> int:
    """Forget workers that stopped reporting (crashed without deregistering)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            sql.RUNTIME_INSTANCE_PRUNE, {"older_than_ms": INSTANCE_EXPIRY_MS, "epoch": epoch}
        )
    return cur.rowcount


async def prune_dlq(pool: AsyncConnectionPool, retention_ms: int, epoch: int) -> int:
    """Delete dead-lettered jobs older than ``retention_ms``; returns how many."""
    params = {"retention_ms": retention_ms, "limit": BATCH, "epoch": epoch}
    return await _in_batches(pool, sql.DLQ_PRUNE, params)


async def prune_ended_batches(pool: AsyncConnectionPool, retention_ms: int, epoch: int) -> int:
    """Delete batch operations that ended (completed or cancelled) more than
    ``retention_ms`` ago; returns how many."""
    params = {"retention_ms": retention_ms, "limit": BATCH, "epoch": epoch}
    return await _in_batches(pool, sql.BATCH_PRUNE, params)


async def prune_full_rate_buckets(pool: AsyncConnectionPool, epoch: int) -> int:
    """Forget fleet rate buckets that refilled to their burst (one per partition key a
    rate-limited queue ever saw, else); returns how many."""
    return await _in_batches(pool, sql.RATE_BUCKETS_PRUNE, {"limit": BATCH, "epoch": epoch})


async def prune_lapsed_seats(pool: AsyncConnectionPool) -> int:
    """Delete handoff seats whose worker died without releasing them (ADR 0045)."""
    async with pool.connection() as conn:
        cur = await conn.execute(sql.SEATS_PRUNE)
    return cur.rowcount
