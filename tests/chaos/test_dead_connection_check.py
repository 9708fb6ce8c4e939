"""The checkout check of awa.db.pool: what it reads from an idle connection's socket.

A backend being terminated sends its FATAL message, then exits and closes the socket.
In between, the message can be read while the end-of-file is not there yet; the check
must already call that connection dead (the race CI met once: a call lent such a
connection failed with "terminating connection due to administrator command").
"""

from __future__ import annotations

import select
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection, pq

from awa.db.pool import _said_goodbye, alive
from tests.helpers import wait_for

pytestmark = pytest.mark.chaos


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[AsyncConnection[Any]]:
    async with await AsyncConnection.connect(database_url, autocommit=True) as conn:
        yield conn


async def _terminated(conn: AsyncConnection[Any], db: psycopg.Connection[Any]) -> None:
    """Terminate ``conn``'s backend and wait until the server has let it go."""
    pid = conn.info.backend_pid
    db.execute("SELECT pg_terminate_backend(%s)", (pid,))

    async def gone() -> bool:
        row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
        return row.fetchone() == (0,)

    await wait_for(gone)


async def test_the_goodbye_alone_marks_the_connection_dead(
    conn: AsyncConnection[Any], db: psycopg.Connection[Any]
) -> None:
    await _terminated(conn, db)
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN)
    assert poller.poll(1000), "the server's goodbye never arrived"
    conn.pgconn.consume_input()  # the first read takes the message, not the end-of-file
    assert conn.pgconn.status == pq.ConnStatus.OK  # so libpq does not know it dead yet
    assert _said_goodbye(conn.pgconn)


async def test_a_terminated_connection_is_dead_and_a_live_one_keeps_its_notices(
    conn: AsyncConnection[Any], database_url: str, db: psycopg.Connection[Any]
) -> None:
    async with await AsyncConnection.connect(database_url, autocommit=True) as listening:
        await listening.execute("LISTEN awa_check")
        db.execute("NOTIFY awa_check, 'kept'")
        poller = select.poll()
        poller.register(listening.pgconn.socket, select.POLLIN)
        assert poller.poll(1000), "the notification never arrived"
        assert alive(listening)  # a notification is not a goodbye
        await listening.execute("SELECT 1")  # psycopg collects queued notifications here
        received = [n async for n in listening.notifies(timeout=1.0, stop_after=1)]
        assert [n.payload for n in received] == ["kept"]
    await _terminated(conn, db)
    assert not alive(conn)
