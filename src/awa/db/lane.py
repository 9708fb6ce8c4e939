"""A connection kept checked out for statements made one after another.

A caller that runs one statement after another — a producer's single inserts, the
completer's writes — would pay for a pool checkout and return on each (~30 µs of client
CPU with psycopg_pool, ~7 % of a durable insert). A lane keeps one pooled connection for
them; a second statement that arrives while the lane is busy takes a connection from the
pool as before, so concurrency is never limited to one. Either way the borrower holds its
connection alone, idle and in autocommit mode, which is what :mod:`awa.db.direct` needs.
The held connection's socket stays watched by the event loop from one statement to the
next (:func:`awa.db.direct.watch`, ADR 0048) until the lane gives the connection up:
when it is found dead, when the lane closes, and whenever another caller of the pool
would otherwise wait for a connection (:class:`awa.db.pool.Pool`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection

from awa.db import direct
from awa.db.pool import Pool, alive, discard, writes_refused


class ConnectionLane:
    """Lends one held connection to whoever needs one while nobody else is using it."""

    def __init__(self) -> None:
        self._busy = asyncio.Lock()
        self._conn: AsyncConnection[Any] | None = None

    def connection(self, pool: Pool) -> _Borrowed:
        """``async with lane.connection(pool) as conn``: the lane's connection when it is
        free, else a fresh one from ``pool``."""
        return _Borrowed(self, pool)

    async def _take(self, pool: Pool) -> AsyncConnection[Any]:
        await self._busy.acquire()
        try:
            if self._conn is not None and not alive(self._conn):
                await self._give_back(pool, dead=True)  # e.g. the server restarted
            if self._conn is None:
                self._conn = await pool.getconn()
                direct.watch(self._conn)
                pool.held_by(self)
        except BaseException:
            self._busy.release()
            raise
        return self._conn

    async def _release(self, pool: Pool, error: BaseException | None) -> None:
        try:
            conn = self._conn
            broken = error is not None and conn is not None and (conn.closed or conn.broken)
            if writes_refused(error):  # a read-only session stays so: never keep it
                await self._give_back(pool, dead=True)
            elif broken or pool.waiting:  # somebody waiting for a connection gets this one
                await self._give_back(pool)
        finally:
            self._busy.release()

    def close_stranded(self) -> None:
        """Close the held connection of a lane whose event loop has closed (see
        :meth:`awa.db.pool.Pool.close_stranded`)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.pgconn.finish()

    async def give_back_idle(self, pool: Pool) -> None:
        """Return the held connection to ``pool`` unless a statement is using it (the
        pool asks when a caller finds every connection out)."""
        if self._conn is not None and not self._busy.locked():
            async with self._busy:
                await self._give_back(pool)

    async def _give_back(self, pool: Pool, dead: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        direct.unwatch(conn)  # before the pool may close it
        if dead:
            await discard(pool, conn)
        else:
            await pool.putconn(conn)  # the pool discards it if it is broken

    async def close(self, pool: Pool) -> None:
        """Return the held connection to ``pool``. Idempotent."""
        async with self._busy:
            await self._give_back(pool)


class _Borrowed:
    """One borrowing of the lane (or of the pool when the lane is busy). A class rather
    than an @asynccontextmanager generator: entered on every statement, it costs ~3 µs
    less."""

    __slots__ = ("_lane", "_pool", "_pooled")

    def __init__(self, lane: ConnectionLane, pool: Pool) -> None:
        self._lane = lane
        self._pool = pool
        self._pooled: Any = None  # the pool's context manager when the lane was busy

    async def __aenter__(self) -> AsyncConnection[Any]:
        if self._lane._busy.locked():
            self._pooled = self._pool.connection()
            return await self._pooled.__aenter__()  # type: ignore[no-any-return]
        return await self._lane._take(self._pool)

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self._pooled is not None:
            await self._pooled.__aexit__(kind, exc, tb)
        else:
            await self._lane._release(self._pool, exc)
