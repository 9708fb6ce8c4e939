"""Every read-only method of the client reads again on another connection when its own
dies under it (AsyncClient._read): a restart or failover fails no read. The reads of the
mixins (cron, DLQ, fleet limits and pool, batches) once used a plain connection and
failed with AdminShutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

import awa
from tests.helpers import wait_for

READS: dict[str, Callable[[awa.AsyncClient], Awaitable[Any]]] = {
    "list_cron_schedules": lambda c: c.list_cron_schedules(),
    "list_dlq": lambda c: c.list_dlq(),
    "get_dlq_job": lambda c: c.get_dlq_job(1),
    "dlq_depth": lambda c: c.dlq_depth(),
    "dlq_depth_by_queue": lambda c: c.dlq_depth_by_queue(),
    "queue_limits": lambda c: c.queue_limits("q"),
    "queue_limits_status": lambda c: c.queue_limits_status(),
    "fleet_pool": lambda c: c.fleet_pool(),
    "preview_batch": lambda c: c.preview_batch(awa.SetPriority(1), queue="q"),
    "get_batch": lambda c: c.get_batch(1),
    "list_batches": lambda c: c.list_batches(),
}
NOT_FOUND = (awa.JobNotFound, awa.BatchNotFound)  # a read that came back


@pytest.mark.parametrize("name", sorted(READS))
async def test_a_read_whose_connection_dies_is_read_again(
    client: awa.AsyncClient, db: psycopg.Connection[Any], name: str
) -> None:
    await client.queue_stats()  # the pool is open before the tables are locked
    tables = [
        row[0] for row in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'awa'")
    ]
    with db.transaction():
        names = sql.SQL(", ").join(sql.Identifier("awa", t) for t in tables)
        db.execute(sql.SQL("LOCK TABLE {}").format(names))
        read = asyncio.create_task(READS[name](client))

        async def the_read_waits() -> list[int]:
            rows = db.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchall()
            return [row[0] for row in rows]

        (pid,) = await wait_for(the_read_waits)
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with contextlib.suppress(*NOT_FOUND):  # it read, and found nothing
        await asyncio.wait_for(read, timeout=15)


@pytest.mark.parametrize("path", ["insert", "transaction", "pooled"])
async def test_a_session_opened_read_only_is_replaced_once_writes_are_allowed_again(
    database_url: str, db: psycopg.Connection[Any], path: str
) -> None:
    """A session takes default_transaction_read_only when it opens: connections opened
    during a failover (or an ALTER DATABASE … read_only) stayed read-only in the pool
    after it was turned off, and every write failed for up to an hour (a review of
    connection pressure). A connection whose write is refused as read-only is replaced."""
    dbname = db.info.dbname
    alter = sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}")
    async with awa.AsyncClient(database_url, max_connections=2) as client:

        async def write() -> None:
            if path == "insert":
                await client.insert({}, kind="k")
            elif path == "transaction":
                async with client.transaction() as tx:
                    await tx.insert({}, kind="k")
            else:
                await client.pause_queue("q")

        await write()
        db.execute(alter.format(sql.Identifier(dbname), sql.SQL("on")))
        try:
            db.execute(  # the pool's sessions end; those it opens next are read-only
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
            for _ in range(3):  # until a write finds a read-only session
                with contextlib.suppress(awa.DatabaseError, psycopg.Error):
                    await write()
        finally:
            db.execute(alter.format(sql.Identifier(dbname), sql.SQL("DEFAULT")))
        refused = 0
        for _ in range(3):  # each refusal replaces its connection (two at most)
            try:
                await write()
                break
            except (awa.DatabaseError, psycopg.errors.ReadOnlySqlTransaction):
                refused += 1
        else:
            pytest.fail("every write still went to a read-only session")
        assert refused <= 2  # one per read-only connection of the pool at most
