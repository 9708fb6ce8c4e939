"""awa against servers configured unlike the defaults: a DateStyle other than ISO, a
database not encoded in UTF8 (a review of real installations' settings)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

import awa
from tests.conftest import PgServer
from tests.helpers import FAST_WORKER, wait_for


async def test_a_datestyle_other_than_iso_changes_nothing(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """psycopg reads times sent as text only in the ISO style: under SQL, DMY an insert
    committed its job and then raised, and a worker's claims took jobs they never ran."""
    name = db.info.dbname
    db.execute(f"ALTER DATABASE \"{name}\" SET datestyle = 'SQL, DMY'")
    ran: list[int] = []
    async with awa.AsyncClient(database_url) as client:

        @client.task(None, kind="k", queue="q")
        async def handler(job: awa.Job[Any]) -> None:
            ran.append(job.id)

        job = await client.insert({}, kind="k", queue="q")
        [bulk] = await client.insert_many([{"n": 1}], kind="k", queue="q")
        assert job.created_at is not None and bulk.run_at is not None
        await client.start([("q", 2)], **FAST_WORKER)
        try:

            async def both_ran() -> bool:
                return sorted(ran) == sorted([job.id, bulk.id])

            await wait_for(both_ran)
        finally:
            await client.shutdown()
        done = await client.get_job(job.id)
        assert done.state is awa.JobState.COMPLETED and done.finalized_at is not None
    with psycopg.connect(database_url) as fresh:  # the setting was in force all along
        assert fresh.info.parameter_status("DateStyle") == "SQL, DMY"


def test_a_database_not_in_utf8_is_refused_at_once_saying_why(pg_server: PgServer) -> None:
    """awa's statements and every JSON value need UTF8: on a LATIN1 database each new
    connection failed, and every call ended in a bare pool timeout after 30 s."""
    name = f"awa_latin1_{time.monotonic_ns()}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    try:
        client = awa.AsyncClient(pg_server.url_for(name))
        with pytest.raises(awa.DatabaseError, match="encoded in LATIN1: awa needs a UTF8"):
            asyncio.run(client.migrate())
    finally:
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
