"""A durable worker waits for durability on its outcomes, not on its claims (ADR 0043).

The server of this test names a synchronous standby that never connects: a commit made
with ``synchronous_commit = on`` then waits until the setting is taken away, while one
made ``off`` (or ``local``, this server's default for everything else) returns at once.
So the job's handler can only start if its claim did not wait, and its completion can
only show once the standby requirement is lifted.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa
from awa.embedded import EmbeddedPostgres
from tests.helpers import wait_for

pytestmark = pytest.mark.chaos


def _state(url: str, job_id: int) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT state FROM awa.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


def _waiting_for_the_standby(url: str) -> bool:
    """A commit of this database waits for the synchronous standby."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event = 'SyncRep'"
        ).fetchone()
    return row is not None and row[0] > 0


def _no_standby_needed(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
        conn.execute("SELECT pg_reload_conf()")


async def test_a_durable_worker_claims_without_waiting_and_completes_durably() -> None:
    data = Path(tempfile.mkdtemp(prefix="awa-durable-claims-"))
    server = EmbeddedPostgres(
        data / "pgdata",
        settings={"synchronous_commit": "local", "synchronous_standby_names": "'nobody'"},
    )
    url = server.start()
    started = asyncio.Event()
    client = awa.AsyncClient(url)

    @client.task(None, kind="durable", queue="dc")
    async def durable(job: awa.Job[Any]) -> None:
        started.set()

    try:
        await client.migrate()
        job = await client.insert({}, kind="durable", queue="dc")
        await client.start([("dc", 2)], synchronous_commit=True)
        # The claim was committed without waiting for the standby: the handler runs.
        await asyncio.wait_for(started.wait(), timeout=15)

        # The completion was written and waits for it: nobody sees the job completed yet.
        async def outcome_waiting() -> bool:
            return await asyncio.to_thread(_waiting_for_the_standby, url)

        await wait_for(outcome_waiting, timeout=15)
        assert await asyncio.to_thread(_state, url, job.id) == "running"
        await asyncio.to_thread(_no_standby_needed, url)

        async def completed() -> bool:
            return await asyncio.to_thread(_state, url, job.id) == "completed"

        await wait_for(completed, timeout=30)
    finally:
        await asyncio.to_thread(_no_standby_needed, url)
        await client.shutdown()
        await client.close()
        server.destroy()
        shutil.rmtree(data, ignore_errors=True)
