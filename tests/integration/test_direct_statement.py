"""A statement run straight through libpq returns what a psycopg cursor returns, fails the
way a cursor fails, and never leaves its connection unusable without closing it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection, errors

import awa
from awa.db import direct
from awa.db.connection import configure
from awa.db.direct import DirectStatement
from tests.helpers import statements_running, wait_for

SLEEP = DirectStatement("test_sleep", "SELECT pg_sleep(%(s)s::float8)")
ECHO = DirectStatement(
    "test_echo",
    "SELECT %(n)s::int8 + 1, %(text)s::text, %(at)s::timestamptz, %(tags)s::text[], "
    "%(blob)s::bytea, %(n)s::int8, '100%%'",
)
NULLS = dict.fromkeys(["n", "text", "at", "tags", "blob"])


async def _connect(url: str) -> AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await configure(conn)
    return conn


async def test_rows_match_what_a_cursor_returns(database_url: str) -> None:
    params = {
        "n": 41,
        "text": "héllo",
        "at": datetime.fromisoformat("2026-01-02T03:04:05.123456+00:00"),
        "tags": ["a", "b c", 'q"uote'],
        "blob": b"\x00\xff",
    }
    async with await _connect(database_url) as conn:
        cursor_rows = await (
            await conn.execute(
                "SELECT %(n)s::int8 + 1, %(text)s::text, %(at)s::timestamptz, "
                "%(tags)s::text[], %(blob)s::bytea, %(n)s::int8, '100%%'",
                params,
            )
        ).fetchall()
        for _ in range(3):  # the first call prepares, the later ones reuse it
            assert await ECHO.rows(conn, params) == cursor_rows
        assert cursor_rows[0][0] == 42 and cursor_rows[0][6] == "100%"


async def test_nulls_pass_through(database_url: str) -> None:
    async with await _connect(database_url) as conn:
        rows = await ECHO.rows(conn, NULLS)
    assert rows == [(None, None, None, None, None, None, "100%")]


async def test_a_server_error_is_psycopgs_exception_and_the_connection_goes_on(
    database_url: str,
) -> None:
    divide = DirectStatement("test_divide", "SELECT 1 / %(d)s::int")
    async with await _connect(database_url) as conn:
        with pytest.raises(errors.DivisionByZero):
            await divide.rows(conn, {"d": 0})
        assert await divide.rows(conn, {"d": 1}) == [(1,)]
        assert not conn.closed


async def test_a_forgotten_prepared_statement_is_prepared_again(database_url: str) -> None:
    async with await _connect(database_url) as conn:
        assert (await ECHO.rows(conn, NULLS))[0][6]
        await conn.execute("DEALLOCATE ALL")
        assert (await ECHO.rows(conn, {**NULLS, "n": 1}))[0][0] == 2


async def test_a_statement_whose_result_a_migration_changed_is_prepared_again(
    database_url: str,
) -> None:
    """A column added under a prepared ``SELECT *`` made every later call fail with
    "cached plan must not change result type" until the connection was replaced."""
    whole_rows = DirectStatement("test_whole_rows", "SELECT * FROM test_shape")
    async with await _connect(database_url) as conn:
        await conn.execute("CREATE TABLE test_shape (a int)")
        await conn.execute("INSERT INTO test_shape VALUES (1)")
        try:
            assert await whole_rows.rows(conn, {}) == [(1,)]
            await conn.execute("ALTER TABLE test_shape ADD COLUMN b int DEFAULT 2")
            assert await whole_rows.rows(conn, {}) == [(1, 2)]
            assert await whole_rows.rows(conn, {}) == [(1, 2)]
        finally:
            await conn.execute("DROP TABLE test_shape")


async def test_client_calls_go_on_after_a_migration_adds_a_column(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Calls reading whole rows through psycopg's cursor (get_job, list_jobs): prepared
    by psycopg after five runs, they failed on every call once a column was added."""
    one = awa.AsyncClient(client.database_url, max_connections=1)
    try:
        job = await one.insert({}, kind="k")
        for _ in range(6):
            assert (await one.get_job(job.id)).id == job.id
            await one.list_jobs(kind="k")
        db.execute("ALTER TABLE awa.jobs ADD COLUMN test_future int")
        assert (await one.get_job(job.id)).id == job.id
        assert [j.id for j in await one.list_jobs(kind="k")] == [job.id]
    finally:
        await one.close()
        db.execute("ALTER TABLE awa.jobs DROP COLUMN test_future")


async def test_statements_naming_their_columns_stay_prepared(database_url: str) -> None:
    """Only the statements reading whole rows go unprepared: with psycopg's preparing off
    altogether, an insert inside client.transaction() was planned at every call (20 %
    slower, a review). An application's composed query there still runs."""
    one = awa.AsyncClient(database_url, max_connections=1)
    try:
        job = await one.insert({}, kind="k")
        for _ in range(6):
            async with one.transaction() as tx:
                await tx.insert({}, kind="k")
                await tx.connection.execute(psycopg.sql.SQL("SELECT {}").format(1))
            await one.get_job(job.id)
        async with one.transaction() as tx:
            # psycopg's own (the direct statements are prepared as awa_<name>)
            cur = await tx.connection.execute(
                "SELECT statement FROM pg_prepared_statements WHERE name LIKE '\\_pg3\\_%%'"
            )
            prepared = [row[0] for row in await cur.fetchall()]
    finally:
        await one.close()
    assert any(text.startswith("-- job_insert") for text in prepared), prepared
    assert not any(text.startswith("-- job_get") for text in prepared), prepared


async def test_without_prepared_statements_nothing_is_prepared(database_url: str) -> None:
    async with await _connect(database_url) as conn:
        direct.send_unnamed(conn)  # as configure() does behind a pooler
        await ECHO.rows(conn, NULLS)
        cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
        assert await cur.fetchone() == (0,)


async def test_a_statement_interrupted_mid_flight_closes_its_connection(
    database_url: str,
) -> None:
    async with await _connect(database_url) as conn:
        await SLEEP.rows(conn, {"s": 0})
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(SLEEP.rows(conn, {"s": 30}), timeout=0.2)
        # its reply would still be on the way: the connection cannot serve a next statement
        assert conn.closed


async def test_a_lone_percent_sign_is_refused() -> None:
    with pytest.raises(ValueError, match="%%"):
        DirectStatement("test_bad", "SELECT 'a' LIKE 'a%'")


async def test_a_cancelled_insert_is_cancelled_on_the_server_too(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A single insert cancelled while it waits for its reply never writes its job (the
    server went on once the lock was free, and committed what the caller was told did
    not happen), and the client inserts again (the connection is closed and replaced)."""
    await client.insert({}, kind="k")
    with db.transaction():  # the insert waits on this lock: cancelled mid-flight for sure
        db.execute("LOCK TABLE awa.jobs IN EXCLUSIVE MODE")
        task = asyncio.ensure_future(client.insert({"cancelled": True}, kind="k"))
        await wait_for(lambda: statements_running(db, "-- job_insert", on_a_lock=True))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def no_insert_runs() -> bool:
        return not await statements_running(db, "-- job_insert")

    await wait_for(no_insert_runs)
    row = db.execute("SELECT count(*) FROM awa.jobs WHERE args ? 'cancelled'").fetchone()
    assert row == (0,)
    job = await client.insert({"after": True}, kind="k")
    assert job.args == {"after": True}


@asynccontextmanager
async def _watched(url: str) -> AsyncIterator[tuple[AsyncConnection[Any], int]]:
    """A connection kept watched (and its socket's number, which a lost connection no
    longer tells), unwatched and closed afterwards."""
    conn = await _connect(url)
    fd = conn.pgconn.socket
    direct.watch(conn)
    try:
        yield conn, fd
    finally:
        direct.unwatch(conn)
        await conn.close()


def _registered(fd: int) -> bool:
    """Whether the running loop's selector has socket ``fd`` (asyncio's default selector
    loop; its map is the only place that says)."""
    loop: Any = asyncio.get_running_loop()
    return fd in loop._selector.get_map()


async def test_a_watched_connection_stays_registered_between_statements(
    database_url: str,
) -> None:
    async with _watched(database_url) as (conn, fd):
        await ECHO.rows(conn, NULLS)
        assert _registered(fd)
        direct.unwatch(conn)
        assert not _registered(fd)
        # unwatched, a statement registers for its reply only
        await ECHO.rows(conn, NULLS)
        assert not _registered(fd)


async def test_a_watched_connection_reads_a_reply_of_many_reads(database_url: str) -> None:
    """A result far larger than one socket read comes back whole, and the next statement
    on the same watched connection works."""
    many = DirectStatement(
        "test_many", "SELECT g, repeat('x', 200) FROM generate_series(1, %(n)s::int) AS g"
    )
    big = DirectStatement("test_big", "SELECT length(%(s)s::text)")
    async with _watched(database_url) as (conn, _):
        rows = await many.rows(conn, {"n": 20_000})
        assert len(rows) == 20_000 and rows[-1] == (20_000, "x" * 200)
        # a statement larger than the socket takes at once waits to be written too
        assert await big.rows(conn, {"s": "y" * 4_000_000}) == [(4_000_000,)]
        assert await ECHO.rows(conn, {**NULLS, "n": 1})


async def test_a_watched_connection_that_hears_from_the_server_between_statements(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """When the server ends the session between statements, the watch stops watching
    (instead of being called on every pass of the loop) and the next statement fails
    the way an unwatched one would."""
    async with _watched(database_url) as (conn, fd):
        await ECHO.rows(conn, NULLS)
        db.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))

        async def unregistered() -> bool:
            return not _registered(fd)

        await wait_for(unregistered)
        with pytest.raises(psycopg.OperationalError):
            await ECHO.rows(conn, NULLS)
        assert conn.closed and not _registered(fd)


async def test_an_interrupted_statement_on_a_watched_connection_unregisters_it(
    database_url: str,
) -> None:
    async with _watched(database_url) as (conn, fd):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(SLEEP.rows(conn, {"s": 30}), timeout=0.2)
        assert conn.closed and not _registered(fd)


async def _sleeping_on_the_server(db: psycopg.Connection[Any], conn: AsyncConnection[Any]) -> None:
    """Until ``conn``'s server session is inside SLEEP's pg_sleep."""

    async def sleeping() -> bool:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event = 'PgSleep'",
            (conn.info.backend_pid,),
        ).fetchone()
        return row is not None and row[0] > 0

    await wait_for(sleeping)


async def test_a_watched_connection_whose_server_ends_mid_statement_unregisters_it(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    async with _watched(database_url) as (conn, fd):
        task = asyncio.ensure_future(SLEEP.rows(conn, {"s": 30}))

        await _sleeping_on_the_server(db, conn)
        db.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            await task
        assert conn.closed and not _registered(fd)


def _lose_the_registration(fd: int) -> None:
    """What uvloop was seen to do after a server crash: the loop stops watching a socket
    without telling the watch, so no wakeup ever comes for its next reply."""
    asyncio.get_running_loop().remove_reader(fd)


async def test_a_reply_the_loop_never_announces_is_found_by_the_patrol(
    database_url: str,
) -> None:
    async with _watched(database_url) as (conn, fd):
        await ECHO.rows(conn, NULLS)
        _lose_the_registration(fd)
        rows = await asyncio.wait_for(ECHO.rows(conn, {**NULLS, "n": 1}), timeout=10)
        assert rows[0][0] == 2  # found within a patrol round, not waited for for ever
        assert not _registered(fd)  # the untrusted registration was dropped...
        await ECHO.rows(conn, NULLS)
        assert _registered(fd)  # ...and the next statement registered afresh


async def test_a_link_lost_while_its_wakeup_is_lost_fails_instead_of_hanging(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    async with _watched(database_url) as (conn, fd):
        task = asyncio.ensure_future(SLEEP.rows(conn, {"s": 30}))

        await _sleeping_on_the_server(db, conn)
        _lose_the_registration(fd)
        db.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(task, timeout=10)
        assert conn.closed
