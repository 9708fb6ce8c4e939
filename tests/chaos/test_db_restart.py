"""A database restart (and killed connections) in the middle of a run: the worker recovers."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.support import Recorder, check_history, install_audit
from tests.conftest import PgServer
from tests.helpers import FAST_WORKER, wait_for

pytestmark = pytest.mark.chaos


def _restart(pg_server: PgServer, mode: str = "fast") -> None:
    if pg_server.embedded is not None:
        pg_server.embedded.restart(mode=mode)
        return
    command = os.environ.get("AWA_TEST_PG_RESTART")
    if not command:
        pytest.skip("external DATABASE_URL: set AWA_TEST_PG_RESTART to a restart command")
    subprocess.run(command, shell=True, check=True)


def _completed(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_worker_survives_a_database_restart(
    client: awa.AsyncClient, database_url: str, pg_server: PgServer, mode: str
) -> None:
    """``fast`` is a clean restart; ``immediate`` is a crash: the server skips its
    shutdown checkpoint and recovers from WAL, so the last asynchronously committed
    claims and outcomes may be forgotten (ADR 0006). Either way nothing is lost, nothing
    stays running, each job ends exactly once, and the worker's connections come back."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        install_audit(conn)
        # The test server runs with synchronous_commit=off for speed; a production server
        # keeps it on, so acknowledged inserts survive a crash and only the worker's hot
        # path commits asynchronously (ADR 0006). Restore that here.
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET synchronous_commit = on')
    recorder = Recorder(database_url)

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await asyncio.sleep(0.01)
        recorder.record(job)

    total = 400
    await client.insert_many([{"i": i} for i in range(total)], kind="k", queue="q")
    await client.start([("q", 8)], **FAST_WORKER)
    worker = client._worker
    try:
        await wait_for(lambda: asyncio.to_thread(lambda: _completed(database_url) >= 50))
        await asyncio.to_thread(_restart, pg_server, mode)
        # New work inserted after the restart is picked up too (the pool reconnects).
        await wait_for(lambda: _insert_after_restart(client), timeout=30)
        await wait_for(lambda: asyncio.to_thread(_all_completed, database_url), timeout=60)
        health = await wait_for(lambda: _healthy(client), timeout=30)
        assert health.postgres_connected
        # The LISTEN and leader connections were lost with the server, and came back.
        await wait_for(lambda: _reconnected(worker, 2), timeout=30)
    finally:
        await client.shutdown()
        recorder.close()
    with psycopg.connect(database_url, autocommit=True) as conn:
        ids = {i for (i,) in conn.execute("SELECT id FROM awa.jobs").fetchall()}
        assert len(ids) > total
        check_history(conn, ids)


def _all_completed(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE state <> 'completed'), count(*) FROM awa.jobs"
        ).fetchone()
    return row is not None and row[0] == 0 and row[1] > 0


async def test_stopping_a_service_whose_tick_swallows_the_cancellation() -> None:
    """What hung the leader after a restart: a dependency (asyncio.wait_for in
    psycopg_pool, Python 3.11) swallowed the CancelledError meant to stop a maintenance
    service; stepping down waited for it forever, and no rescue ever ran again."""
    from awa.service import Periodic

    entered = asyncio.Event()

    async def tick() -> None:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return  # swallowed, as the buggy dependency does

    service = Periodic("swallower", 60, tick)
    service.start()
    await entered.wait()
    async with asyncio.timeout(10):  # a failure guard, not a synchronisation
        await service.stop()
    assert not service.alive and service.ticks == 1


async def _insert_after_restart(client: awa.AsyncClient) -> bool:
    try:
        await client.insert({"i": -1}, kind="k", queue="q")
    except awa.DatabaseError:
        return False
    return True


async def _healthy(client: awa.AsyncClient) -> awa.HealthCheck | None:
    health = await client.health_check()
    return health if health.healthy else None


async def test_terminated_backends_are_survived(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Every awa connection — pooled ones, the LISTEN connection and the leader's lease
    connection — is terminated again and again during a run: each reconnects, notices
    resume, leadership comes back, and every job ends exactly once."""
    install_audit(db)
    recorder = Recorder(database_url)

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await asyncio.sleep(0.005)
        recorder.record(job)

    total = 300
    await client.insert_many([{"i": i} for i in range(total)], kind="k", queue="q")
    # "idle" polls once a minute: only an awa_available notice can wake it within a test.
    idle = awa.QueueConfig("idle", max_workers=1, poll_interval_ms=60_000)
    await client.start([("q", 8), idle], **{**FAST_WORKER, "override_refresh_ms": 60_000})
    worker = client._worker
    dbname = db.info.dbname
    try:
        for round_ in range(1, 4):
            await wait_for(functools.partial(_reconnected, worker, round_), timeout=30)
            await wait_for(lambda: asyncio.to_thread(lambda: _completed(database_url) > 0))
            listener_pid, leader_pid = _special_pids(db)
            pids = [
                pid
                for (pid,) in db.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid()",
                    (dbname,),
                ).fetchall()
            ]
            db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
            assert {listener_pid, leader_pid} <= set(pids)
        # Both special connections came back after the last round…
        await wait_for(lambda: _reconnected(worker, 4), timeout=30)
        # …notices flow again: a job on "idle" is claimed long before its poll interval…
        # (Until the worker has reconnected, an insert may still fail: hence the retries.)
        await wait_for(lambda: _insert(client, queue="idle"), timeout=30)
        # …and the new leader's promoter runs: a job due in a moment becomes available.
        later = datetime.now(UTC) + timedelta(milliseconds=300)
        await wait_for(lambda: _insert(client, queue="q", run_at=later), timeout=30)
        await wait_for(lambda: asyncio.to_thread(_all_completed, database_url), timeout=60)
    finally:
        await client.shutdown()
        recorder.close()
    ids = {i for (i,) in db.execute("SELECT id FROM awa.jobs").fetchall()}
    assert len(ids) >= total + 2
    check_history(db, ids)


async def _insert(client: awa.AsyncClient, **options: Any) -> bool:
    try:
        await client.insert({}, kind="k", **options)
    except awa.DatabaseError:
        return False
    return True


async def _reconnected(worker: Any, times: int) -> bool:
    """The LISTEN connection was opened and leadership won ``times`` times."""
    return bool(
        worker.listener.connected
        and worker.listener.connections >= times
        and worker.leader.is_leader
        and worker.leader.elections >= times
    )


def _special_pids(db: psycopg.Connection[Any]) -> tuple[int, int]:
    """The backends of the LISTEN connection and of the leader's lease connection."""
    listener = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN%%'"
    ).fetchone()
    leader = db.execute(
        "SELECT holder_pid FROM awa.leader_lease WHERE expires_at > clock_timestamp()"
    ).fetchone()
    assert listener is not None and leader is not None
    return int(listener[0]), int(leader[0])
