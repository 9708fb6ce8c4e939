"""Priority aging: available jobs gain a priority level per interval they wait.

Run by the leader for the queues it is configured with; ``priority_aging_interval_ms``
comes from each :class:`~awa.config.QueueConfig` (0 turns aging off for that queue).
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool

from awa.config import QueueConfig
from awa.db import sql

BATCH = 5_000
MIN_TICK_S = 0.05
MAX_TICK_S = 30.0


def aging_queues(queues: Sequence[QueueConfig]) -> dict[str, int]:
    """Queue → aging interval (ms) for the queues that age."""
    return {
        q.name: q.priority_aging_interval_ms for q in queues if q.priority_aging_interval_ms > 0
    }


def tick_seconds(intervals: dict[str, int]) -> float:
    """How often to run: half the shortest interval, within [50 ms, 30 s]."""
    shortest = min(intervals.values()) / 1000
    return min(max(shortest / 2, MIN_TICK_S), MAX_TICK_S)


async def age_priorities(pool: AsyncConnectionPool, intervals: dict[str, int], epoch: int) -> int:
    """Raise the priority of jobs that waited long enough; returns how many changed."""
    params = {
        "queues": list(intervals),
        "intervals_ms": list(intervals.values()),
        "limit": BATCH,
        "epoch": epoch,
    }
    total = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(sql.JOB_AGE_PRIORITY, params)
            changed = len(await cur.fetchall())
        total += changed
        if changed < BATCH:
            return total
