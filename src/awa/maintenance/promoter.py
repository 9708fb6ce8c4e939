"""Promotion: scheduled and retryable jobs whose time has come become available."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from awa.db import sql

BATCH = 1_000


async def promote_due(pool: AsyncConnectionPool, epoch: int) -> int:
    """Promote due jobs in batches until none is left; returns how many. Fenced by the
    leader's lease ``epoch`` (ADR 0019), as is every maintenance statement."""
    total = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(sql.JOB_PROMOTE_DUE, {"limit": BATCH, "epoch": epoch})
            promoted = sum(int(row[1]) for row in await cur.fetchall())
        total += promoted
        if promoted < BATCH:
            return total
