"""The leader folds the finished jobs' count changes into their counts (ADR 0054).

Every statement that changes finished jobs appends a row or a few to
``awa.finished_count_changes``; ``queue_stats()`` adds them to ``awa.finished_counts``.
Folded every ``FOLD_INTERVAL_S``, the changes stay a few thousand rows at the fastest
drain measured here, and the counts' buckets coarsen as they age (seconds, then minutes,
then hours), so a reader sums a few hundred rows per queue.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from awa.db import sql

FOLD_INTERVAL_S = 2.0


async def fold(pool: AsyncConnectionPool) -> int:
    """Fold the appended changes now; returns how many change rows it folded."""
    async with pool.connection() as conn:
        cur = await conn.execute(sql.FINISHED_COUNTS_FOLD)
        row = await cur.fetchone()
    return int(row[0]) if row else 0
