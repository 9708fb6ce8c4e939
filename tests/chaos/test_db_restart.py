"""A database restart (and killed connections) in the middle of a run: the worker recovers."""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

import psycopg
import pytest

import awa
from tests.conftest import PgServer
from tests.helpers import FAST_WORKER, wait_for

pytestmark = pytest.mark.chaos


def _restart(pg_server: PgServer) -> None:
    if pg_server.embedded is not None:
        pg_server.embedded.restart(mode="fast")
        return
    command = os.environ.get("AWA_TEST_PG_RESTART")
    if not command:
        pytest.skip("external DATABASE_URL: set AWA_TEST_PG_RESTART to a restart command")
    subprocess.run(command, shell=True, check=True)


def _completed(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
    return int(row[0]) if row else 0


async def test_worker_survives_a_database_restart(
    client: awa.AsyncClient, database_url: str, pg_server: PgServer
) -> None:
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await asyncio.sleep(0.01)

    total = 400
    await client.insert_many([{"i": i} for i in range(total)], kind="k", queue="q")
    await client.start([("q", 8)], **FAST_WORKER)
    try:
        await wait_for(lambda: asyncio.to_thread(lambda: _completed(database_url) >= 50))
        await asyncio.to_thread(_restart, pg_server)
        # New work inserted after the restart is picked up too (the pool reconnects).
        await wait_for(lambda: _insert_after_restart(client), timeout=30)
        await wait_for(
            lambda: asyncio.to_thread(lambda: _completed(database_url) == total + 1), timeout=60
        )
        health = await wait_for(lambda: _healthy(client), timeout=30)
        assert health.postgres_connected
    finally:
        await client.shutdown()
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state <> 'completed'").fetchone()
    assert row == (0,)


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
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await asyncio.sleep(0.005)

    total = 300
    await client.insert_many([{"i": i} for i in range(total)], kind="k", queue="q")
    await client.start([("q", 8)], **FAST_WORKER)
    dbname = db.info.dbname
    try:
        for _ in range(3):
            await wait_for(lambda: asyncio.to_thread(lambda: _completed(database_url) > 0))
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
        await wait_for(
            lambda: asyncio.to_thread(lambda: _completed(database_url) == total), timeout=60
        )
    finally:
        await client.shutdown()
