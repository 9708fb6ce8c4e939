"""``health_check()``: is the database reachable and is every loop of the worker alive?

Read from the worker's published :class:`~awa.types.RuntimeSnapshot`, like every other
view of a running worker; :meth:`~awa.types.RuntimeSnapshot.problems` is the one
definition of a healthy worker, which ``awa health --worker`` applies to the snapshots
other processes published.
"""

from __future__ import annotations

import asyncio

from psycopg_pool import AsyncConnectionPool

from awa.types import HealthCheck, QueueHealth, RuntimeSnapshot

PROBE_TIMEOUT_S = 5.0


async def _postgres_ok(pool: AsyncConnectionPool | None) -> bool:
    if pool is None:  # the client could not open its pool
        return False
    try:
        async with (
            asyncio.timeout(PROBE_TIMEOUT_S),
            pool.connection(timeout=PROBE_TIMEOUT_S) as conn,
        ):
            await conn.execute("SELECT 1")
        return True
    except Exception:
        return False


async def health_check(
    pool: AsyncConnectionPool | None, snap: RuntimeSnapshot | None
) -> HealthCheck:
    """Health of this client and, when one runs, its worker (``snap``: its snapshot);
    ``pool`` None when the client could not open one (the database unreachable)."""
    postgres = await _postgres_ok(pool)
    unreachable = [] if postgres else ["the database is unreachable"]
    if snap is None:
        return HealthCheck(
            healthy=postgres,
            postgres_connected=postgres,
            poll_loop_alive=False,
            heartbeat_alive=False,
            shutting_down=False,
            leader=False,
            queues={},
            problems=unreachable,
        )
    poll_alive = all(q.polling for q in snap.queues.values())
    heartbeat_alive = snap.services.get("heartbeat", False)
    queues = {
        name: QueueHealth(
            in_flight=q.in_flight,
            available=q.available,
            capacity=q.capacity,
            paused=q.paused,
            stuck=q.stuck,
            progressing=q.progressing,
        )
        for name, q in snap.queues.items()
    }
    problems = unreachable + snap.problems()
    return HealthCheck(
        healthy=not problems,
        postgres_connected=postgres,
        poll_loop_alive=poll_alive,
        heartbeat_alive=heartbeat_alive,
        shutting_down=snap.shutting_down,
        leader=snap.leader,
        queues=queues,
        problems=problems,
    )
