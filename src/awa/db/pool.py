"""The connection pool: a connection the server already closed is never lent.

After a database restart or a failover every idle pooled connection is dead, and nothing
says so until it is used: psycopg_pool would lend it, the caller's statement would fail
with "terminating connection due to administrator command", and only then would the
pool drop it — one failed application call per idle connection. Yet the server's goodbye
(a FATAL message, then end-of-file) is already waiting in the socket. :func:`alive`
looks for it with a zero-timeout ``poll`` of the socket — one system call, no round trip
— and :class:`Pool` runs it on every checkout, discarding a dead connection for the next
one instead of lending it.

psycopg_pool's own ``check=`` hook is not used: after each failed check it sleeps (1 s,
then doubling), so a pool of ten dead connections would stall a call for minutes.

What the check cannot see is a connection that dies after it was lent (the server goes
down mid-call). Whether such a statement ran is unknowable, so writes fail with
:class:`~awa.errors.DatabaseError`; read-only calls are run again by the client.

Lanes (:mod:`awa.db.lane`) keep a pooled connection between their statements. They keep
it only while nobody else needs one: a caller that finds every connection out asks the
idle lanes for theirs, and a busy lane hands its connection back after its statement
whenever somebody is waiting.
"""

from __future__ import annotations

import random
import select
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import psycopg
import psycopg.errors
from psycopg import AsyncConnection, pq
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from awa.log import fault

# A live idle connection rarely has anything to read (a NOTIFY on a LISTEN connection);
# a dead one has the server's last message and then end-of-file. Reading this many
# times is enough to reach the end-of-file behind the message.
_MAX_READS = 3

# How long a caller waits for a connection before asking the idle holders (lanes) for
# theirs, when the pool could still grow but may not be able to (see Pool._next).
HOLDERS_AFTER_S = 0.5

# The longest wait between two attempts to open a connection the server refused, as the
# listener and the leader wait. psycopg_pool doubles its wait without bound (1, 2, 4 …
# 64 s): a client that made a call while the server was down for a minute then failed
# every call for up to a minute more with the server back, and a worker ran no job for
# 50 s (a review). Each capped wait is drawn between half and all of it: every lost
# connection of every worker retries on its own, and in step they would meet a server
# that is back, or refusing with "too many clients", all at once.
RECONNECT_DELAY_MAX_S = 5.0

# The severities of the message a server sends a session it is closing.
_GOODBYE = frozenset({b"FATAL", b"PANIC"})


def alive(conn: AsyncConnection[Any]) -> bool:
    """False when ``conn`` is known dead, without a round trip (see the module doc).

    A backend that is ending sends its FATAL message before it exits and closes the
    socket, so the message can be read while the end-of-file is not there yet: the
    message alone is enough to know the connection dead.
    """
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK:
        return False
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLIN)
    for _ in range(_MAX_READS):
        if not poller.poll(0):
            return True
        try:
            pgconn.consume_input()  # reads what arrived; end-of-file marks it bad
        except psycopg.OperationalError:
            return False
        if pgconn.status != pq.ConnStatus.OK or _said_goodbye(pgconn):
            return False
    return True


def writes_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from) is the server refusing a write in a
    read-only session. A session takes ``default_transaction_read_only`` when it opens: one
    opened while it was on (a failover in progress, an operator's ALTER DATABASE) stays
    read-only after it is turned off, and kept in the pool it failed every write for up to
    an hour (the pool's connection lifetime; a review). Such a connection is closed rather
    than kept."""
    seen = 0
    while exc is not None and seen < 8:  # awa's errors are raised from psycopg's
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _said_goodbye(pgconn: pq.abc.PGconn) -> bool:
    """Whether what ``consume_input`` read holds the server's FATAL goodbye.

    On an idle connection libpq hands an unsolicited error to the notice receiver when
    it parses its input; ``is_busy`` parses without taking anything else (notifications
    stay queued for psycopg). The connection's own notice handler is put back at once.
    """
    own = pgconn.notice_handler
    severities: list[bytes | None] = []

    def capture(res: pq.abc.PGresult) -> None:
        severities.append(res.error_field(pq.DiagnosticField.SEVERITY_NONLOCALIZED))
        if own is not None:
            own(res)  # the application's notice handlers still see every notice

    pgconn.notice_handler = capture
    try:
        pgconn.is_busy()
    finally:
        pgconn.notice_handler = own
    return any(severity in _GOODBYE for severity in severities)


class Holder(Protocol):
    """Something that keeps a pooled connection between uses (a lane)."""

    async def give_back_idle(self, pool: Pool) -> None:
        """Return the connection now unless it is in use."""


class _Backoff(AttemptWithBackoff):
    """psycopg_pool's reconnect backoff, its wait capped at :data:`RECONNECT_DELAY_MAX_S`."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        if self.delay > RECONNECT_DELAY_MAX_S:
            self.delay = RECONNECT_DELAY_MAX_S * random.uniform(0.5, 1.0)


class Pool(AsyncConnectionPool[AsyncConnection[Any]]):
    """An ``AsyncConnectionPool`` that never lends a connection :func:`alive` knows dead,
    gets connections back from idle holders when it has none left, tries a refused
    connection again at least every :data:`RECONNECT_DELAY_MAX_S`, and says why it had
    none to lend."""

    dead_discarded = 0  # connections found dead at checkout (tests read it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = 0  # callers inside getconn: a busy holder gives back to them
        self._holders: weakref.WeakSet[Holder] = weakref.WeakSet()
        # Why the last attempt to open a connection failed; None once one opened.
        self.connect_failure: str | None = None

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        await super()._add_connection(
            attempt or _Backoff(timeout=self.reconnect_timeout), growing=growing
        )

    async def _connect(self, timeout: float | None = None) -> AsyncConnection[Any]:
        try:
            conn = await super()._connect(timeout)
        except Exception as exc:
            self.connect_failure = fault(exc)
            raise
        self.connect_failure = None
        return conn

    def close_stranded(self) -> None:
        """Close the idle connections of a pool whose event loop has closed: nothing can
        give them back or close them the usual way (awaiting on that loop), and left to
        the garbage collector they stayed open until a full collection (a direct
        statement's per-connection state refers back to its connection: a cycle)."""
        for conn in list(self._pool):
            conn.pgconn.finish()

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConnection[Any]]:
        """psycopg_pool's, except that a connection whose session refused a write as
        read-only is closed (and replaced), not kept: see :func:`writes_refused`."""
        async with super().connection(timeout) as conn:
            try:
                yield conn
            except BaseException as exc:
                if writes_refused(exc):
                    await conn.close()
                raise

    def held_by(self, holder: Holder) -> None:
        """``holder`` keeps a connection of this pool between uses (see the module doc)."""
        self._holders.add(holder)

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[Any]:
        """A connection not known dead: each dead one is handed back (the pool closes it
        and opens a replacement in the background) and the next one is tried."""
        self.waiting += 1
        try:
            if self._holders and self._all_out():
                await self._ask_holders()
            for _ in range(self.max_size):
                conn = await self._next(timeout)
                if alive(conn):
                    return conn
                self.dead_discarded += 1
                await discard(self, conn)
            return await self._next(timeout)  # all were dead: this one is new
        except PoolTimeout as exc:
            failure = self.connect_failure
            if failure is None:
                raise
            # "couldn't get a connection after 30.00 sec" said nothing of the server
            # refusing them (a review): the last attempt's reason goes with it.
            raise PoolTimeout(f"{exc}; the last attempt to connect failed: {failure}") from None
        finally:
            self.waiting -= 1

    async def _ask_holders(self) -> None:
        for holder in list(self._holders):
            await holder.give_back_idle(self)

    async def _next(self, timeout: float | None) -> AsyncConnection[Any]:
        """psycopg_pool's next connection; when none comes within ``HOLDERS_AFTER_S``,
        the idle holders are asked for theirs before waiting the rest. The pool may be
        short of ``max_size`` because the server refuses more connections (a role's
        CONNECTION LIMIT, ``max_connections`` used up by others): then it is never "all
        out", and an idle worker's lanes kept the only connections while every other
        service of it timed out (due jobs waited minutes; a review)."""
        wait = self.timeout if timeout is None else timeout
        if not self._holders or wait <= HOLDERS_AFTER_S:
            return await super().getconn(timeout)
        try:
            return await super().getconn(HOLDERS_AFTER_S)
        except PoolTimeout:
            await self._ask_holders()
        try:
            return await super().getconn(wait - HOLDERS_AFTER_S)
        except PoolTimeout:  # its message names the second wait only: the whole one
            raise PoolTimeout(f"couldn't get a connection after {wait:.2f} sec") from None

    def _all_out(self) -> bool:
        """Every connection the pool may open is open and lent."""
        stats = self.get_stats()
        return stats["pool_available"] == 0 and stats["pool_size"] >= self.max_size


async def discard(pool: AsyncConnectionPool[Any], conn: AsyncConnection[Any]) -> None:
    """Hand a connection :func:`alive` found dead back to ``pool`` for good.

    It is closed first: one whose goodbye was read but whose end-of-file was not still
    looks usable to libpq, and the pool would lend it again.
    """
    await conn.close()
    await pool.putconn(conn)  # closed: the pool drops it and opens a replacement
