"""Transactional enqueue: jobs become visible only if the surrounding transaction commits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, LiteralString, Unpack

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa.client import insert as insert_path
from awa.client.insert import InsertOptions
from awa.errors import TransactionEnded
from awa.types import StoredJob

Query = LiteralString | Any  # a str, or a psycopg.sql.Composable

SpecBuilder = Callable[..., insert_path.InsertSpec]
SpecsBuilder = Callable[..., list[insert_path.InsertSpec]]


class Transaction:
    """A database transaction that can both run the application's SQL and insert jobs.

    ``execute``/``fetch_*`` take psycopg-style parameters (``%s`` or ``%(name)s``).
    ``connection`` is the underlying psycopg connection, for anything else.

    Calls made at once from several tasks (``asyncio.gather``) run one after another: a
    unique insert is three statements (a savepoint around the insert), and another
    task's statement run between them was undone with the savepoint. After the block
    ends every call raises :class:`~awa.errors.TransactionEnded`.
    """

    def __init__(
        self, conn: AsyncConnection[Any], build: SpecBuilder, build_many: SpecsBuilder
    ) -> None:
        self._conn = conn
        self._ended = False
        self._turn = asyncio.Lock()
        self._build = build
        self._build_many = build_many

    @property
    def connection(self) -> AsyncConnection[Any]:
        """The transaction's psycopg connection (TransactionEnded once the block ended:
        the pool may have lent it to another caller's transaction)."""
        if self._ended:
            raise TransactionEnded()
        return self._conn

    @asynccontextmanager
    async def _using(self) -> AsyncIterator[AsyncConnection[Any]]:
        """The connection, for one call at a time."""
        async with self._turn:
            yield self.connection

    async def _end(self) -> None:
        """Refuse every later call (those waiting for their turn too), then wait for the
        call in flight: an interrupted one unwinds its savepoint before the commit or the
        rollback. Ended first, so that a cancelled wait ends the transaction as well."""
        self._ended = True
        async with self._turn:
            pass

    async def execute(
        self, query: Query, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> int:
        """Run one statement; returns the affected row count."""
        async with self._using() as conn:
            cur = await conn.execute(query, params)
            return cur.rowcount

    async def fetch_one(
        self, query: Query, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The first row as a dict; LookupError when there is none."""
        row = await self.fetch_optional(query, params)
        if row is None:
            raise LookupError("query returned no rows")
        return row

    async def fetch_optional(
        self, query: Query, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The first row as a dict, or None."""
        async with self._using() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
            return await cur.fetchone()

    async def fetch_all(
        self, query: Query, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every row as a dict."""
        async with self._using() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
            return await cur.fetchall()

    async def insert(self, /, args: Any, **options: Unpack[InsertOptions]) -> StoredJob:
        """Insert a job inside this transaction (same options as ``AsyncClient.insert``).
        A unique job's insert runs in a savepoint: its ``UniqueConflict`` may be caught
        and the transaction goes on."""
        spec = self._build(args, **options)
        async with self._using() as conn:
            return await insert_path.insert_one(conn, spec)

    async def insert_many(
        self, /, args_list: Sequence[Any], **options: Unpack[InsertOptions]
    ) -> list[StoredJob]:
        """Insert many jobs inside this transaction (COPY-based); with unique jobs among
        them, in a savepoint, as ``insert``."""
        specs = self._build_many(args_list, **options)
        async with self._using() as conn:
            if all(spec.unique_key is None for spec in specs):
                return await insert_path.insert_many(conn, specs)
            async with conn.transaction():
                return await insert_path.insert_many(conn, specs)
