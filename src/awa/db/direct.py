"""One fixed statement run straight through libpq, for calls made thousands of times a second.

Around each statement psycopg's cursor spends about 20 µs of client CPU of its own (its
connection lock, converting and looking up the query for its prepare cache, the cursor's
result state, its wait machinery): a fifth of what a single insert costs the client, and
the part no faster awa code can remove. A :class:`DirectStatement` converts its query to
``$n`` placeholders once, prepares it once per connection, and executes it with libpq's
asynchronous calls waited on by the event loop. psycopg's own ``Transformer`` still dumps
the parameters and loads the rows, so values and errors come back exactly as a cursor
would give them (the errors as psycopg's exception classes, for :func:`awa.db.errors.mapped`).

Behind a connection pooler (``prepare_threshold`` is ``None``, see
:func:`awa.db.connection.configure`) the statement goes unnamed and unprepared each time,
as psycopg would send it there.

Only for a connection its caller holds alone, idle, in autocommit mode, between whole
statements: the insert lane's, or one just checked out of the pool. psycopg does not see
these statements, which is harmless because it keeps no state a statement outside a
transaction changes. A call interrupted mid-statement (a cancelled task) closes the
connection: its reply is still on the way, so the connection cannot serve the next
statement, and the pool discards a closed connection.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import AsyncConnection, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.errors import error_from_result
from psycopg.rows import RowMaker

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")
# Plain ints: a PGresult's status is one, and comparing with the IntEnum costs more.
_ROWS = frozenset({int(pq.ExecStatus.TUPLES_OK), int(pq.ExecStatus.COMMAND_OK)})
_FAILED = int(pq.ExecStatus.FATAL_ERROR)
_SQLSTATE = int(pq.DiagnosticField.SQLSTATE)
# SQLSTATE invalid_sql_statement_name: the server forgot the prepared statement (a
# DISCARD ALL, a pooler's server_reset_query); prepare it again and run once more.
_UNKNOWN_STATEMENT = b"26000"


def _positional(query: str) -> tuple[bytes, tuple[str, ...]]:
    """``query`` with ``%(name)s`` as ``$n`` (one number per name) and its names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            if match.group(0) == "%%":
                return "%"
            raise ValueError("a lone % in a direct statement: write %% for a literal %")
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, query).encode(), tuple(names)


class Fetched:
    """One statement's result as a cursor would hold it after ``fetchall``: ``pgresult``
    (what awa's row factories and :func:`awa.worker.args_budget.args_sizes` read) and the
    rows made from it."""

    __slots__ = ("pgresult", "rows")

    def __init__(self, pgresult: pq.abc.PGresult) -> None:
        self.pgresult: pq.abc.PGresult | None = pgresult
        self.rows: list[Any] = []


class _Session:
    """What one connection keeps for direct statements: its Transformer (adapters are
    looked up once per type, not per call) and the names it has prepared."""

    __slots__ = ("encoding", "prepared", "transformer")

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.transformer = Transformer(conn)
        self.prepared: set[bytes] = set()
        self.encoding = conn.info.encoding


_SESSIONS: weakref.WeakKeyDictionary[AsyncConnection[Any], _Session] = weakref.WeakKeyDictionary()


def _session(conn: AsyncConnection[Any]) -> _Session:
    session = _SESSIONS.get(conn)
    if session is None:
        session = _SESSIONS[conn] = _Session(conn)
    return session


class DirectStatement:
    """A statement with ``%(name)s`` parameters, run by :meth:`rows` on a held connection."""

    __slots__ = ("_formats", "_name", "_names", "_query")

    def __init__(self, name: str, query: str) -> None:
        self._name = f"awa_{name}".encode()
        self._query, self._names = _positional(query)
        # Text parameters, typed by the statement's own casts and columns: a prepared
        # statement's parameter types are fixed, and psycopg would pick int2/int4/int8
        # per value for binary ones.
        self._formats = [PyFormat.TEXT] * len(self._names)

    async def rows(
        self, conn: AsyncConnection[Any], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """The rows the statement returns for ``params``, as tuples; psycopg's exception
        on failure."""
        return (await self.fetch(conn, params)).rows

    async def fetch(
        self,
        conn: AsyncConnection[Any],
        params: Mapping[str, Any],
        row_factory: Callable[[Fetched], RowMaker[Any]] | None = None,
    ) -> Fetched:
        """The statement's result for ``params``, each row made by ``row_factory`` (a
        psycopg row factory that reads only ``pgresult``, as awa's own do) or a tuple."""
        session = _session(conn)
        result = await self._result(conn, session, params)
        if result.status not in _ROWS:
            raise error_from_result(result, encoding=session.encoding)
        fetched = Fetched(result)
        transformer = session.transformer
        transformer.set_pgresult(result)
        try:
            make = tuple if row_factory is None else row_factory(fetched)
            fetched.rows = transformer.load_rows(0, result.ntuples, make)
        finally:
            # A claim's result holds its jobs' args (up to 1 MiB each): an idle pooled
            # connection must not keep it alive.
            transformer.set_pgresult(None)
        return fetched

    async def _result(
        self, conn: AsyncConnection[Any], session: _Session, params: Mapping[str, Any]
    ) -> pq.abc.PGresult:
        values = session.transformer.dump_sequence(
            [params[name] for name in self._names], self._formats
        )
        pgconn = conn.pgconn
        try:
            if conn.prepare_threshold is None:  # behind a pooler: unnamed, every time
                pgconn.send_query_params(self._query, values)
                return await _reply(pgconn)
            result = await self._run_prepared(pgconn, session, values)
            if result.status == _FAILED and result.error_field(_SQLSTATE) == _UNKNOWN_STATEMENT:
                session.prepared.discard(self._name)  # nothing ran: prepare, run once more
                result = await self._run_prepared(pgconn, session, values)
            return result
        except (asyncio.CancelledError, psycopg.OperationalError):
            # A reply may still be on its way (see the module doc), or the link is gone.
            if pgconn.status == pq.ConnStatus.OK:
                pgconn.finish()
            raise

    async def _run_prepared(
        self, pgconn: pq.abc.PGconn, session: _Session, values: Any
    ) -> pq.abc.PGresult:
        if self._name not in session.prepared:
            await self._prepare(pgconn, session)
        pgconn.send_query_prepared(self._name, values)
        return await _reply(pgconn)

    async def _prepare(self, pgconn: pq.abc.PGconn, session: _Session) -> None:
        pgconn.send_prepare(self._name, self._query)
        result = await _reply(pgconn)
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise error_from_result(result, encoding=session.encoding)
        session.prepared.add(self._name)


async def _reply(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    """Send what is queued on ``pgconn`` and wait for the one statement's result."""
    loop = asyncio.get_running_loop()
    fd = pgconn.socket
    while pgconn.flush():
        await _ready(loop, fd, writable=True)
    last: pq.abc.PGresult | None = None
    while True:
        # Busy until a whole result is read; just after sending it always is, so the
        # socket is waited for before it is read (a read then would find nothing).
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                if last is None:
                    raise psycopg.OperationalError("the server sent no result")
                return last
            last = result
        await _ready(loop, fd, writable=False)
        pgconn.consume_input()


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, writable: bool) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    if writable:
        loop.add_writer(fd, _wake, ready)
    else:
        loop.add_reader(fd, _wake, ready)
    try:
        await ready
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def _wake(ready: asyncio.Future[None]) -> None:
    # The loop polls again before the waiting task resumes, and calls this again while
    # the socket stays ready.
    if not ready.done():
        ready.set_result(None)
