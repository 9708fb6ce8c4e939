"""One fixed statement run straight through libpq, for calls made thousands of times a second.

Around each statement psycopg's cursor spends about 20 µs of client CPU of its own (its
connection lock, converting and looking up the query for its prepare cache, the cursor's
result state, its wait machinery): a fifth of what a single insert costs the client, and
the part no faster awa code can remove. A :class:`DirectStatement` converts its query to
``$n`` placeholders once, prepares it once per connection, and executes it with libpq's
asynchronous calls waited on by the event loop. psycopg's own ``Transformer`` still dumps
the parameters and loads the rows, so values and errors come back exactly as a cursor
would give them (the errors as psycopg's exception classes, for :func:`awa.db.errors.mapped`).

Behind a connection pooler (:func:`send_unnamed`, called by
:func:`awa.db.connection.configure`) the statement goes unnamed and unprepared each time,
as psycopg would send it there.

Only for a connection its caller holds alone, idle, in autocommit mode, between whole
statements: the insert lane's, or one just checked out of the pool. psycopg does not see
these statements, which is harmless because it keeps no state a statement outside a
transaction changes. A call interrupted mid-statement (a cancelled task) closes the
connection: its reply is still on the way, so the connection cannot serve the next
statement, and the pool discards a closed connection.

A connection held for many statements in a row (a lane's: the producer's single inserts,
the completer's writes, the dispatchers' claims) can be kept watched
with :func:`watch`: its socket stays registered with the event loop between statements
instead of being registered for each reply and removed after it (ADR 0048). Its holder
calls :func:`unwatch` before the connection goes anywhere else.
"""

from __future__ import annotations

import asyncio
import logging
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
# SQLSTATE feature_not_supported, which "cached plan must not change result type" is: a
# migration changed what the statement returns (a column added to a table it reads).
# Nothing ran; deallocated and prepared again, the statement returns the new shape.
_RESULT_CHANGED = b"0A000"
# A statement waiting for its reply looks at its socket itself this often, whatever the
# event loop says: a wakeup the loop never delivers (uvloop lost some after a server crash,
# leaving the worker's writes waiting for ever) then costs this long, not the process.
PATROL_S = 1.0
# How long an interrupted call waits for the server to take its cancel request.
_CANCEL_TIMEOUT_S = 5.0

logger = logging.getLogger("awa")


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


class _Watch:
    """A held connection's socket, registered with one event loop between statements.

    Registering the socket for each reply and removing it afterwards costs two
    ``epoll_ctl`` calls, a selector key and a handle per statement (ADR 0048). While a
    statement waits, the callback itself reads what arrived and wakes the statement only
    once its result is complete: the loop polls again before the woken task runs, so a
    callback that only signalled would run twice per reply (the unread bytes still
    there), and the second call would meet the next statement's waiter.

    The registration must not outlive the socket: asyncio believes a descriptor it has
    registered stays registered, so a later socket given the same number would never be
    watched by whoever waits on it next. Hence the holder's :func:`unwatch` before the
    connection is returned, discarded or closed.
    """

    __slots__ = ("active", "fd", "loop", "patrol", "pgconn", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, pgconn: pq.abc.PGconn) -> None:
        self.loop = loop
        self.pgconn = pgconn
        self.fd = pgconn.socket  # kept: a lost connection no longer tells its socket
        self.waiter: asyncio.Future[None] | None = None
        self.patrol = _patrol(loop)
        loop.add_reader(self.fd, self._on_readable)
        self.active = True

    def _on_readable(self) -> None:
        if self.waiter is None:
            # Something arrived between statements (a notice, the server's goodbye): stop
            # watching, or the level-triggered poll would call this on every pass; the
            # next statement registers again.
            self.close()
            return
        self._read()

    def _read(self) -> bool:
        """Read what arrived; complete the waiter when its result is whole or the link
        broke. True when it did."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return False
        try:
            self.pgconn.consume_input()
        except psycopg.OperationalError as exc:  # the link broke
            waiter.set_exception(exc)
            return True
        if self.pgconn.is_busy():
            return False
        waiter.set_result(None)
        return True

    def look(self) -> None:
        """The patrol's look at a statement still waiting: a reply (or a broken link) the
        loop never announced means its registration is not to be trusted any more, so it
        is dropped and the next statement registers afresh."""
        if self._read():
            self.close()

    def close(self) -> None:
        if self.active:
            self.active = False
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)


class _Patrol:
    """One event loop's statements waiting on kept watches, looked at every ``PATROL_S``
    while there are any (a timer, not a task: nothing is left pending when the loop
    closes)."""

    __slots__ = ("loop", "timer", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: set[_Watch] = set()
        self.timer: asyncio.TimerHandle | None = None

    def add(self, watch: _Watch) -> None:
        self.waiting.add(watch)
        if self.timer is None:
            self.timer = self.loop.call_later(PATROL_S, self._round)

    def _round(self) -> None:
        self.timer = None
        for watch in list(self.waiting):
            watch.look()
        if self.waiting:
            self.timer = self.loop.call_later(PATROL_S, self._round)


_PATROLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Patrol] = (
    weakref.WeakKeyDictionary()
)


def _patrol(loop: asyncio.AbstractEventLoop) -> _Patrol:
    patrol = _PATROLS.get(loop)
    if patrol is None:
        patrol = _PATROLS[loop] = _Patrol(loop)
    return patrol


class _Session:
    """What one connection keeps for direct statements: its Transformer (adapters are
    looked up once per type, not per call), the names it has prepared, and whether its
    holder keeps it watched (:func:`watch`)."""

    __slots__ = ("encoding", "kept", "prepared", "transformer", "unnamed", "watched")

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.transformer = Transformer(conn)
        self.prepared: set[bytes] = set()
        self.unnamed = False  # send every statement unnamed and unprepared (see send_unnamed)
        self.encoding = conn.info.encoding
        self.kept = False
        self.watched: _Watch | None = None

    def arm(self, pgconn: pq.abc.PGconn) -> asyncio.Future[None] | None:
        """For a kept session, the future completed once a result can be taken (the
        reply read by the watch). Made before the statement is sent, so that nothing but
        the wait itself lies between the send and the client's sleep (the server just
        woken may be waiting for this core). None for a session not kept."""
        if not self.kept:
            return None
        loop = asyncio.get_running_loop()
        watched = self.watched
        if watched is None or not watched.active or watched.loop is not loop:
            self.drop_watch()
            watched = self.watched = _Watch(loop, pgconn)
        waiter = watched.waiter = loop.create_future()
        watched.patrol.add(watched)
        return waiter

    def disarm(self) -> None:
        """The statement is over: readable from now on means the server spoke unasked.
        (A link that broke meanwhile raised, and its socket was unwatched then.)"""
        watched = self.watched
        if watched is not None:
            watched.waiter = None
            watched.patrol.waiting.discard(watched)

    def drop_watch(self) -> None:
        if self.watched is not None:
            self.watched.close()
            self.watched = None


# Kept on the connection itself. In a WeakKeyDictionary, the session's Transformer (which
# holds its connection) kept every key alive: a pool dropped with its closed event loop
# never closed its connections, one server connection left per asyncio.run of a
# module-level client, until the server refused more (a review).
_SESSION_ATTR = "_awa_direct_session"


def _session(conn: AsyncConnection[Any]) -> _Session:
    session: _Session | None = getattr(conn, _SESSION_ATTR, None)
    if session is None:
        session = _Session(conn)
        setattr(conn, _SESSION_ATTR, session)
    return session


def send_unnamed(conn: AsyncConnection[Any]) -> None:
    """Never prepare a direct statement on ``conn``: behind a pooler in transaction mode,
    each statement may reach another server connection, where the prepared one is not."""
    _session(conn).unnamed = True


def watch(conn: AsyncConnection[Any]) -> None:
    """Keep ``conn``'s socket registered with the event loop between direct statements
    (see :class:`_Watch`), until :func:`unwatch`."""
    _session(conn).kept = True


def before_psycopg(conn: AsyncConnection[Any]) -> None:
    """Drop ``conn``'s kept watch before psycopg waits on its socket itself: psycopg takes
    the registration over and removes it, so the watch would wait for a wakeup that never
    comes. Called by every wait of :class:`awa.db.connection.Connection` (the pool's
    connections); the next direct statement registers afresh."""
    session: _Session | None = getattr(conn, _SESSION_ATTR, None)
    if session is not None:
        session.drop_watch()


def unwatch(conn: AsyncConnection[Any]) -> None:
    """Stop watching ``conn`` between statements. Idempotent; call it before ``conn`` is
    returned to a pool, discarded or closed."""
    session: _Session | None = getattr(conn, _SESSION_ATTR, None)
    if session is not None:
        session.kept = False
        session.drop_watch()


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
            if session.unnamed:  # behind a pooler: unnamed, every time
                armed = session.arm(pgconn)
                pgconn.send_query_params(self._query, values)
                return await _reply(pgconn, session, armed)
            result = await self._run_prepared(pgconn, session, values)
            if result.status == _FAILED:
                state = result.error_field(_SQLSTATE)
                if state in (_UNKNOWN_STATEMENT, _RESULT_CHANGED):  # prepare, run once more
                    await self._forget(pgconn, session, deallocate=state == _RESULT_CHANGED)
                    result = await self._run_prepared(pgconn, session, values)
            return result
        except (asyncio.CancelledError, psycopg.OperationalError):
            # A reply may still be on its way (see the module doc), or the link is gone.
            session.drop_watch()  # before the socket closes (see _Watch)
            if pgconn.status == pq.ConnStatus.OK:
                try:
                    await _cancel_on_server(conn)
                finally:
                    pgconn.finish()
            raise

    async def _run_prepared(
        self, pgconn: pq.abc.PGconn, session: _Session, values: Any
    ) -> pq.abc.PGresult:
        if self._name not in session.prepared:
            await self._prepare(pgconn, session)
        armed = session.arm(pgconn)
        pgconn.send_query_prepared(self._name, values)
        return await _reply(pgconn, session, armed)

    async def _forget(self, pgconn: pq.abc.PGconn, session: _Session, *, deallocate: bool) -> None:
        if deallocate:
            armed = session.arm(pgconn)
            pgconn.send_query(b"DEALLOCATE " + self._name)
            result = await _reply(pgconn, session, armed)
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise error_from_result(result, encoding=session.encoding)
        session.prepared.discard(self._name)  # only once the server forgot it too

    async def _prepare(self, pgconn: pq.abc.PGconn, session: _Session) -> None:
        armed = session.arm(pgconn)
        pgconn.send_prepare(self._name, self._query)
        result = await _reply(pgconn, session, armed)
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise error_from_result(result, encoding=session.encoding)
        session.prepared.add(self._name)


async def _reply(
    pgconn: pq.abc.PGconn, session: _Session, armed: asyncio.Future[None] | None
) -> pq.abc.PGresult:
    """Send what is still queued on ``pgconn`` and wait for the one statement's result.
    ``armed``: a kept session's waiter, made before the send (see ``_Session.arm``)."""
    loop = asyncio.get_running_loop()
    fd = pgconn.socket
    try:
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
            if armed is None:
                armed = session.arm(pgconn)  # a reply taken in more than one result
            if armed is None:
                await _ready(loop, fd, writable=False)
                pgconn.consume_input()
            else:
                await armed  # the watch has read the reply
                armed = None
    finally:
        session.disarm()


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, writable: bool) -> None:
    """Until ``fd`` is ready, or ``PATROL_S`` passed (the caller looks at the socket
    itself, then waits again if it must)."""
    ready: asyncio.Future[None] = loop.create_future()
    if writable:
        loop.add_writer(fd, _wake, ready)
    else:
        loop.add_reader(fd, _wake, ready)
    timer = loop.call_later(PATROL_S, _wake, ready)
    try:
        await ready
    finally:
        timer.cancel()
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def _wake(ready: asyncio.Future[None]) -> None:
    # The loop polls again before the waiting task resumes, and calls this again while
    # the socket stays ready.
    if not ready.done():
        ready.set_result(None)


async def _cancel_on_server(conn: AsyncConnection[Any]) -> None:
    """Cancel the statement the server still runs for an interrupted call. Closing the
    connection alone is not enough: a statement waiting on a lock does not notice, and
    once the lock is free it runs and commits — an insert the caller was told did not
    happen (and may retry). psycopg's cursor does the same on an interrupted call."""
    if conn.pgconn.transaction_status != pq.TransactionStatus.ACTIVE:
        return  # the reply was all read, or none was due
    try:
        await conn.cancel_safe(timeout=_CANCEL_TIMEOUT_S)
    except Exception as exc:  # the call is interrupted either way; say why it may have run
        logger.warning("could not cancel an interrupted statement on the server: %s", exc)
