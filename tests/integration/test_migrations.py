"""Migrations: idempotent, safe concurrently, and a clear error when missing."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import awa
from awa.db import migrations


async def test_migrate_is_idempotent_and_concurrent_safe(empty_database_url: str) -> None:
    clients = [awa.AsyncClient(empty_database_url) for _ in range(3)]
    try:
        applied = await asyncio.gather(*(c.migrate() for c in clients))
        assert sorted(len(a) for a in applied) == [0, 0, len(migrations.migrations())]
        assert await clients[0].migrate() == []
        await clients[0].check_schema()
    finally:
        for c in clients:
            await c.close()
    with psycopg.connect(empty_database_url) as conn:
        versions = conn.execute("SELECT version FROM awa.schema_version ORDER BY 1").fetchall()
    assert [v for (v,) in versions] == [m.version for m in migrations.migrations()]


async def test_unmigrated_database_raises_schema_not_migrated(empty_database_url: str) -> None:
    async with awa.AsyncClient(empty_database_url) as client:
        with pytest.raises(awa.SchemaNotMigrated, match="awa migrate"):
            await client.insert({"x": 1}, kind="k")
        with pytest.raises(awa.SchemaNotMigrated):
            await client.check_schema()
        client.task(None, kind="k", queue="q")(lambda job: None)
        with pytest.raises(awa.SchemaNotMigrated):
            await client.start([("q", 1)])


async def test_newer_schema_is_refused(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.schema_version (version, name) VALUES (9999, 'future')")
    async with awa.AsyncClient(database_url) as client:
        with pytest.raises(awa.SchemaTooNew):
            await client.check_schema()
        with pytest.raises(awa.SchemaTooNew):
            await client.migrate()


def test_render_sql_contains_every_migration() -> None:
    script = migrations.render_sql()
    for m in migrations.migrations():
        assert f"-- {m.version:04d}_{m.name}" in script
    assert "CREATE TABLE awa.jobs" in script
