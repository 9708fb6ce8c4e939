"""``health_check()``: is the database reachable and is every loop of the worker alive?"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.types import HealthCheck, QueueHealth

PROBE_TIMEOUT_S = 5.0


async def _postgres_ok(pool: AsyncConnectionPool) -> bool:
    try:
        async with (
            asyncio.timeout(PROBE_TIMEOUT_S),
            pool.connection(timeout=PROBE_TIMEOUT_S) as conn,
        ):
            await conn.execute("SELECT 1")
        return True
    except Exception:
        return False


async def health_check(pool: AsyncConnectionPool, worker: Any | None) -> HealthCheck:
    """Health of this client and, when one runs, its worker."""
    postgres = await _postgres_ok(pool)
    if worker is None:
        return HealthCheck(
            healthy=postgres,
            postgres_connected=postgres,
            poll_loop_alive=False,
            heartbeat_alive=False,
            shutting_down=False,
            leader=False,
            queues={},
        )
    dispatchers = worker.dispatchers.values()
    poll_alive = all(d.alive for d in dispatchers)
    heartbeat_alive = worker.heartbeat.running
    queues = {
        name: QueueHealth(
            in_flight=d.permits.in_flight,
            available=d.permits.available,
            capacity=d.permits.capacity(),
            paused=d.control.paused,
        )
        for name, d in worker.dispatchers.items()
    }
    return HealthCheck(
        healthy=postgres and poll_alive and heartbeat_alive and not worker.shutting_down,
        postgres_connected=postgres,
        poll_loop_alive=poll_alive,
        heartbeat_alive=heartbeat_alive,
        shutting_down=worker.shutting_down,
        leader=worker.leader.is_leader,
        queues=queues,
    )
