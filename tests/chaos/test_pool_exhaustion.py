"""The application holds every connection of the client's pool while a worker on that
client runs: the worker waits (claims, heartbeats and outcome flushes queue up for a
connection, nothing crashes) and recovers once the connections are released."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.support import Recorder, check_history, install_audit
from tests.helpers import FAST_WORKER, wait_for

pytestmark = pytest.mark.chaos

POOL_SIZE = 3


def _count(db: psycopg.Connection[Any], where: str) -> int:
    row = db.execute(f"SELECT count(*) FROM awa.jobs WHERE {where}").fetchone()
    return int(row[0]) if row else 0


async def test_worker_waits_out_an_exhausted_pool_and_recovers(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    install_audit(db)
    recorder = Recorder(database_url)
    client = awa.AsyncClient(database_url, max_connections=POOL_SIZE)

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await asyncio.sleep(0.3)
        recorder.record(job)

    jobs = await client.insert_many([{"i": i} for i in range(60)], kind="k", queue="q")
    ids = {j.id for j in jobs}
    release = asyncio.Event()
    held = 0

    async def hold() -> None:
        nonlocal held
        async with client.transaction() as tx:
            await tx.execute("SELECT 1")
            held += 1
            await release.wait()

    await client.start([("q", 4)], **FAST_WORKER)
    holders: list[asyncio.Task[None]] = []
    try:
        await wait_for(lambda: asyncio.to_thread(_count, db, "state = 'completed'"))
        holders = [asyncio.create_task(hold()) for _ in range(POOL_SIZE)]

        async def all_held() -> bool:
            return held == POOL_SIZE

        await wait_for(all_held, timeout=30)
        pool = await client._get_pool()

        async def starved() -> bool:
            # The worker's own requests queue up for a connection…
            return bool(pool.get_stats().get("requests_waiting", 0) > 0)

        await wait_for(starved)
        # …while its in-flight jobs go without heartbeats for longer than the staleness.
        staleness_ms = FAST_WORKER["heartbeat_staleness_ms"]
        stale = f"state = 'running' AND heartbeat_at < now() - {staleness_ms} * interval '1 ms'"
        await wait_for(lambda: asyncio.to_thread(_count, db, stale), timeout=30)
        assert all(d.alive for d in client._worker.dispatchers.values())
        release.set()
        await asyncio.gather(*holders)
        await wait_for(
            lambda: asyncio.to_thread(lambda: _count(db, "state = 'completed'") == len(ids)),
            timeout=60,
        )
        health = await wait_for(lambda: _healthy(client), timeout=30)
        assert health.postgres_connected
    finally:
        release.set()
        await asyncio.gather(*holders, return_exceptions=True)
        await client.close()
        recorder.close()
    check_history(db, ids)


async def _healthy(client: awa.AsyncClient) -> awa.HealthCheck | None:
    health = await client.health_check()
    return health if health.healthy else None
