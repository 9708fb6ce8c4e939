"""Migrations: idempotent, safe concurrently, and a clear error when missing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import awa
from awa.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY
from awa.db import migrations
from tests.helpers import statements_running, stop_migrations_before, wait_for


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
    assert script.startswith("BEGIN ISOLATION LEVEL READ COMMITTED;") and script.rstrip().endswith(
        "COMMIT;"
    )


async def test_the_sql_for_a_partly_migrated_schema_is_its_pending_migrations(
    empty_database_url: str,
) -> None:
    """What ``awa migrate --sql`` prints for a database at version 10 applies there as it
    stands, and brings it to the latest version; for a current one there is nothing."""
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(migrations.render_sql().split("-- 0011_")[0] + "COMMIT;")
    async with awa.AsyncClient(empty_database_url) as client:
        script = await client.migration_sql()
        assert "-- 0011_" in script and "-- 0010_" not in script
        with psycopg.connect(empty_database_url, autocommit=True) as conn:
            conn.execute(script)
        await client.check_schema()
        assert (await client.migration_sql()).startswith("-- the awa schema is at version")
        assert await client.migrate() == []


async def test_migrate_with_nothing_pending_needs_no_right_to_create(
    database_url: str,
) -> None:
    """An application role (docs/security.md) may call migrate() at start-up: with the
    schema current it only reads the version, and creates nothing."""
    async with _as_role(database_url, "awa_reader", 'GRANT USAGE ON SCHEMA awa TO "{role}"',
                        'GRANT SELECT ON awa.schema_version TO "{role}"') as client:  # fmt: skip
        assert await client.migrate() == []


@asynccontextmanager
async def _as_role(url: str, prefix: str, *setup: str) -> AsyncIterator[awa.AsyncClient]:
    """A client of a login role made for one test, after ``setup`` (statements naming it
    ``{role}``); the role is dropped with everything it owns afterwards."""
    role = f"{prefix}_{abs(hash(url)) % 10**8}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        for statement in setup:
            conn.execute(statement.format(role=role, db=conn.info.dbname))  # test-only DDL
    try:
        async with awa.AsyncClient(conninfo.make_conninfo(url, user=role)) as client:
            yield client
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


_BAD_WRITES = [
    ("jobs_kind_check", "INSERT INTO awa.jobs (kind, queue) VALUES ('', 'q')"),
    ("jobs_queue_check", "INSERT INTO awa.jobs (kind, queue) VALUES ('k', repeat('q', 201))"),
    ("jobs_priority_check", "INSERT INTO awa.jobs (kind, queue, priority) VALUES ('k', 'q', 5)"),
    ("jobs_priority_check", "UPDATE awa.jobs SET original_priority = 0"),
    ("jobs_attempt_check", "UPDATE awa.jobs SET attempt = -1"),
    ("jobs_max_attempts_check", "UPDATE awa.jobs SET max_attempts = 1001"),
    ("jobs_tags_check", "UPDATE awa.jobs SET tags = array_fill('t'::text, ARRAY[21])"),
    ("jobs_ordering_key_check", "UPDATE awa.jobs SET ordering_key = ''"),
]


@pytest.mark.parametrize(("constraint", "statement"), _BAD_WRITES)
def test_job_rules_hold_for_raw_sql(database_url: str, constraint: str, statement: str) -> None:
    """The rules live in the schema (domains since 0016), not only in the client."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q')")
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(statement)
        assert caught.value.diag.constraint_name == constraint
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (1,)


async def test_0016_keeps_the_table_and_its_rows(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upgrading a populated schema relabels columns in place: same table file, same rows,
    and the claim functions re-created by 0016 still claim them."""
    go_on = stop_migrations_before(monkeypatch, 16)
    async with awa.AsyncClient(empty_database_url) as client:
        await client.migrate()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, tags, ordering_key)"
            " SELECT 'k', 'q', ARRAY['t'], CASE WHEN g % 2 = 0 THEN 'o' || g END"
            " FROM generate_series(1, 50) AS g"
        )
        before = conn.execute("SELECT pg_relation_filenode('awa.jobs')").fetchone()
    pending = go_on()
    async with awa.AsyncClient(empty_database_url) as client:
        assert await client.migrate() == pending
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_relation_filenode('awa.jobs')").fetchone() == before
        claimed = conn.execute(
            "SELECT kind, queue, priority, tags, ordering_key FROM awa.claim('q', 100, 0, 'on')"
        ).fetchall()
    assert len(claimed) == 50
    assert {(k, q, p, tuple(t)) for k, q, p, t, _ in claimed} == {("k", "q", 2, ("t",))}
    assert sum(1 for *_, key in claimed if key is not None) == 25


def test_the_job_defaults_of_the_client_are_the_tables(db: psycopg.Connection[Any]) -> None:
    """A bulk insert of jobs at their defaults leaves priority and max_attempts to the
    column defaults (job_copy_in_defaults): the client's and the table's must agree."""
    rows = db.execute(
        "SELECT column_name, column_default FROM information_schema.columns "
        "WHERE table_schema = 'awa' AND table_name = 'jobs' "
        "AND column_name IN ('priority', 'max_attempts') ORDER BY column_name"
    ).fetchall()
    assert rows == [
        ("max_attempts", str(DEFAULT_MAX_ATTEMPTS)),
        ("priority", str(DEFAULT_PRIORITY)),
    ]


MIGRATION_DDL = "ALTER TABLE awa.jobs ADD COLUMN test_future"


def _with_a_future_migration(monkeypatch: pytest.MonkeyPatch, ddl: str) -> int:
    every = migrations.migrations()
    future = migrations.Migration(every[-1].version + 1, "test_future", ddl)
    monkeypatch.setattr(migrations, "migrations", lambda: (*every, future))
    return future.version


async def test_an_upgrade_that_deadlocks_with_the_fleet_is_tried_again(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's cron fire takes cron_schedules, then jobs; an upgrade changing both
    the other way round deadlocked with it and `awa migrate` failed (a review): it is
    rolled back whole and tried again."""
    version = _with_a_future_migration(
        monkeypatch,
        "ALTER TABLE awa.jobs ADD COLUMN test_future int;"
        " ALTER TABLE awa.cron_schedules ADD COLUMN test_future int;",
    )
    async with await psycopg.AsyncConnection.connect(client.database_url) as fire:
        # Only the migration may find the deadlock: it waits first, and checks once, a
        # deadlock_timeout after; this side, slowed down, could find it first.
        await fire.execute("SET deadlock_timeout = '1min'")
        await fire.execute(
            "INSERT INTO awa.cron_schedules (name, cron_expr, kind, queue)"
            " VALUES ('c', '* * * * *', 'k', 'q')"
        )
        migrating = asyncio.ensure_future(client.migrate())
        await wait_for(lambda: statements_running(db, MIGRATION_DDL, on_a_lock=True))
        # The migration holds jobs and waits for cron_schedules: this closes the cycle.
        await fire.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q')")
        await fire.commit()
    assert await asyncio.wait_for(migrating, 60) == [version]
    assert db.execute("SELECT count(*) FROM awa.jobs WHERE kind = 'k'").fetchone() == (1,)


async def test_an_upgrade_blocked_by_an_open_transaction_gives_up_saying_so(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its waits are bounded (the fleet's writes queue behind a waiting DDL): after its
    tries it fails naming the cause, changes nothing, and succeeds once the holder ends."""
    version = _with_a_future_migration(
        monkeypatch, "ALTER TABLE awa.jobs ADD COLUMN test_future int;"
    )
    monkeypatch.setattr(migrations, "LOCK_TIMEOUT_MS", 100)
    monkeypatch.setattr(migrations, "LOCK_ATTEMPTS", 2)
    monkeypatch.setattr(migrations, "_LOCK_PAUSE_S", 0.05)
    async with await psycopg.AsyncConnection.connect(client.database_url) as holder:
        await holder.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q')")
        with pytest.raises(awa.DatabaseError, match=r"could not take the locks.*2 tries"):
            await client.migrate()
        assert f"-- {version:04d}_test_future" in await client.migration_sql()  # not applied
        await holder.commit()
    assert await client.migrate() == [version]


async def test_the_sql_of_an_upgrade_gives_up_on_a_lock_instead_of_queueing_the_fleet(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The printed script waited as long as a transaction held a table lock, and every
    insert of the fleet queued behind it (a review); `awa migrate` itself never did."""
    _with_a_future_migration(monkeypatch, "ALTER TABLE awa.jobs ADD COLUMN test_future int;")
    script = await client.migration_sql()
    assert "lock_timeout" in script
    with psycopg.connect(client.database_url) as holder:
        holder.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q')")  # left open
        db.execute("SET statement_timeout = '60s'")  # a guard: the test fails, not hangs
        with pytest.raises(psycopg.errors.LockNotAvailable):
            db.execute(script)
        db.execute("ROLLBACK")
        holder.rollback()
    db.execute(script)  # once the holder is gone it applies
    assert await client.migration_sql() != script


@pytest.mark.parametrize("how", ["migrate", "--sql"])
async def test_an_owner_of_a_schema_a_dba_made_migrates_without_create_on_the_database(
    empty_database_url: str, how: str
) -> None:
    """0001's own CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
    schema exists: the owner was refused on a fresh database (a review)."""
    async with _as_role(empty_database_url, "awa_owner",
                        'REVOKE CREATE ON DATABASE "{db}" FROM PUBLIC',
                        'CREATE SCHEMA awa AUTHORIZATION "{role}"') as client:  # fmt: skip
        if how == "migrate":
            assert await client.migrate() == [m.version for m in migrations.migrations()]
        else:  # the script `awa migrate --sql` prints, applied by the owner
            script = await client.migration_sql()
            assert "CREATE SCHEMA" not in script
            with psycopg.connect(client.database_url, autocommit=True) as conn:
                conn.execute(script)
        await client.check_schema()


async def test_the_sql_of_an_upgrade_creates_no_schema() -> None:
    """Creating the schema "if not exists" needs CREATE on the database, which the owner
    of an existing schema may lack (``awa migrate`` does not ask for it)."""
    assert "CREATE SCHEMA" in migrations.render_sql(0)
    assert "CREATE SCHEMA" not in migrations.render_sql(1)
