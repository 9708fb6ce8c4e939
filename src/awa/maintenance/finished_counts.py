"""The leader folds the finished jobs' count changes into their counts (ADR 0054).

Whatever finishes a job, or takes one out of a finished state, appends rows to
``awa.finished_count_changes``; ``queue_stats()`` adds them to ``awa.finished_counts``.
Folded every ``FOLD_INTERVAL_S``, the changes stay a few thousand rows at the fastest
drain measured here, and the counts' buckets coarsen as they age (seconds, then minutes,
then hours), so a reader sums a few hundred rows per queue.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.errors import DatabaseError

FOLD_INTERVAL_S = 2.0


async def fold(pool: AsyncConnectionPool) -> int:
    """Fold the appended changes now; returns how many change rows it folded."""
    async with pool.connection() as conn:
        cur = await conn.execute(sql.FINISHED_COUNTS_FOLD)
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def check_grants(conn: AsyncConnection[Any]) -> None:
    """Raise unless this role holds every grant a worker needs (docs/security.md), naming
    the GRANTs it lacks: among them the two functions that write the counts, neither
    ``PUBLIC``'s (the outcomes' count, which every completion calls, and the leader's fold)."""
    cur = await conn.execute(sql.ROLE_MISSING_WORKER_GRANTS)
    missing = [row[0] for row in await cur.fetchall()]
    if missing:
        raise DatabaseError(
            "this role lacks grants a worker needs: as the owner of awa's schema, "
            f"{'; '.join(f'{grant} TO it' for grant in missing)} (docs/security.md)"
        )
