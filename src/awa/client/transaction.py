"""Transactional enqueue: jobs become visible only if the surrounding transaction commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, LiteralString, Unpack

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa.client import insert as insert_path
from awa.client.insert import InsertOptions
from awa.types import Job

Query = LiteralString | Any  # a str, or a psycopg.sql.Composable

SpecBuilder = Callable[..., insert_path.InsertSpec]
SpecsBuilder = Callable[..., list[insert_path.InsertSpec]]


class Transaction:
    """A database transaction that can both run the application's SQL and insert jobs.

    ``execute``/``fetch_*`` take psycopg-style parameters (``%s`` or ``%(name)s``).
    ``connection`` is the underlying psycopg connection, for anything else.
    """

    def __init__(
        self, conn: AsyncConnection[Any], build: SpecBuilder, build_many: SpecsBuilder
    ) -> None:
        self.connection = conn
        self._build = build
        self._build_many = build_many

    async def execute(
        self, query: Query, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> int:
        """Run one statement; returns the affected row count."""
        cur = await self.connection.execute(query, params)
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
        cur = self.connection.cursor(row_factory=dict_row)
        await cur.execute(query, params)
        return await cur.fetchone()

    async def fetch_all(
        self, query: Query, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every row as a dict."""
        cur = self.connection.cursor(row_factory=dict_row)
        await cur.execute(query, params)
        return await cur.fetchall()

    async def insert(self, /, args: Any, **options: Unpack[InsertOptions]) -> Job[Any]:
        """Insert a job inside this transaction (same options as ``AsyncClient.insert``).
        A unique job's insert runs in a savepoint: its ``UniqueConflict`` may be caught
        and the transaction goes on."""
        return await insert_path.insert_one(self.connection, self._build(args, **options))

    async def insert_many(
        self, /, args_list: Sequence[Any], **options: Unpack[InsertOptions]
    ) -> list[Job[Any]]:
        """Insert many jobs inside this transaction (COPY-based); with unique jobs among
        them, in a savepoint, as ``insert``."""
        specs = self._build_many(args_list, **options)
        if all(spec.unique_key is None for spec in specs):
            return await insert_path.insert_many(self.connection, specs)
        async with self.connection.transaction():
            return await insert_path.insert_many(self.connection, specs)
