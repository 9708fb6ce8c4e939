"""Numbered, forward-only schema migrations shipped as ``awa/sql/migrations/NNNN_name.sql``.

``migrate`` applies what is pending in one transaction under an advisory lock, so two
processes migrating at once are safe: the second waits, then finds nothing to do. An
upgrade bounds its waits for table locks and tries again (see ``LOCK_TIMEOUT_MS``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, LiteralString

from psycopg import AsyncConnection, errors, sql

from awa.errors import DatabaseError, SchemaNotMigrated, SchemaTooNew

logger = logging.getLogger("awa")

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Arbitrary but fixed: the advisory lock key every awa migrate() takes.
MIGRATION_LOCK_KEY = 0x61776100_6D696772

# CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema exists:
# migrate() runs it only when there is none (a DBA may have made it for the owner).
_SCHEMA: LiteralString = "CREATE SCHEMA IF NOT EXISTS awa"
_VERSION_TABLE: LiteralString = """
CREATE TABLE IF NOT EXISTS awa.schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped with this version of awa, in order."""
    found = []
    for entry in resources.files("awa.sql.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"migration numbering has a gap before {migration.version:04d}")
    return tuple(found)


def latest_version() -> int:
    """The schema version this code expects."""
    return migrations()[-1].version


def render_sql(from_version: int = 0, *, schema_exists: bool | None = None) -> str:
    """The SQL script ``awa migrate --sql`` prints: what migrate() would run on a schema
    at ``from_version`` — the migrations after it, in one transaction under the same
    advisory lock (a script run twice, or beside ``migrate()``, waits its turn; the
    second run then fails on a version already recorded and changes nothing).
    ``schema_exists`` (default: for an upgrade) leaves out creating it, which needs
    CREATE on the database (a DBA may have made the schema for its owner)."""
    if schema_exists is None:
        schema_exists = from_version > 0
    pending = [m for m in migrations() if m.version > from_version]
    if not pending:
        return f"-- the awa schema is at version {from_version}: nothing to apply\n"
    parts = [
        "BEGIN ISOLATION LEVEL READ COMMITTED;",  # as migrate() (see _migrate_once)
        f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY});",
    ]
    if from_version > 0:  # as migrate(): a script queued behind an open transaction
        # held up every insert, claim and completion of the fleet behind it (a review)
        parts.append(
            f"-- An upgrade waits at most {LOCK_TIMEOUT_MS} ms for each table lock (queued "
            "behind a transaction\n-- left open, it would hold up every write of the "
            "fleet behind it). On a lock timeout\n-- nothing is applied: run the script "
            f"again.\nSET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms';"
        )
    # Creating the schema "if not exists" needs CREATE on the database, which the owner
    # of an existing schema may not have (migrate() does not ask).
    parts.append(("" if schema_exists else _SCHEMA + ";\n") + _VERSION_TABLE.strip() + ";")
    for m in pending:
        text = _without_schema(m.sql) if schema_exists else m.sql
        parts.append(f"-- {m.version:04d}_{m.name}\n{text.strip()}")
        parts.append(
            f"INSERT INTO awa.schema_version (version, name) VALUES ({m.version}, '{m.name}');"
        )
    parts.append("COMMIT;")
    return "\n\n".join(parts) + "\n"


async def current_version(conn: AsyncConnection[Any]) -> int:
    """The highest applied version, 0 when the schema was never migrated."""
    cur = await conn.execute("SELECT to_regclass('awa.schema_version') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM awa.schema_version")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


def _too_new(version: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"database schema is at version {version}, this awa knows up to "
        f"{latest_version()}: upgrade awa"
    )


async def pending_sql(conn: AsyncConnection[Any]) -> str:
    """:func:`render_sql` for the schema ``conn`` reaches, as it is now."""
    version = await current_version(conn)
    if version > latest_version():
        raise _too_new(version)
    cur = await conn.execute("SELECT to_regnamespace('awa') IS NOT NULL")
    return render_sql(version, schema_exists=(await cur.fetchone()) == (True,))


# An upgrade's DDL waits for the tables it changes: while it waits, every insert, claim
# and completion of the fleet queues behind it. So each wait is bounded, and a migration
# that cannot get its locks in time (a transaction left open on awa.jobs), or that
# deadlocks with a running fleet (the leader's cron fire takes cron_schedules then jobs),
# is rolled back whole and tried again a few times before it gives up, saying why.
LOCK_TIMEOUT_MS = 3_000
LOCK_ATTEMPTS = 5
_LOCK_PAUSE_S = 1.0


async def migrate(conn: AsyncConnection[Any]) -> list[int]:
    """Apply pending migrations; returns the versions applied (empty when up to date)."""
    version = await current_version(conn)
    if version > latest_version():  # said before anything needs a right to create
        raise _too_new(version)
    if version == latest_version():  # nothing to do: needs no right to create anything
        return []
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            return await _migrate_once(conn, upgrade=version > 0)
        except (errors.LockNotAvailable, errors.DeadlockDetected) as exc:
            if attempt == LOCK_ATTEMPTS:
                raise DatabaseError(
                    f"awa migrate could not take the locks of awa's tables in {attempt} "
                    f"tries of {LOCK_TIMEOUT_MS} ms ({_first_line(exc)}): a transaction on "
                    "them stays open, or the fleet's writes keep deadlocking with it (see "
                    "pg_stat_activity); run it again"
                ) from exc
            logger.warning(
                "awa migrate: %s; rolled back, trying again (%d of %d)",
                _first_line(exc), attempt + 1, LOCK_ATTEMPTS,
            )  # fmt: skip
            await asyncio.sleep(_LOCK_PAUSE_S)
    raise AssertionError("unreachable")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def _migrate_once(conn: AsyncConnection[Any], *, upgrade: bool) -> list[int]:
    applied: list[int] = []
    async with conn.transaction():
        # Read committed whatever the database's default: a migration that derives rows
        # from the jobs (0038's counts) reads them once its locks keep writers out, and
        # under a snapshot taken before it waited for them it missed their commits.
        await conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        if upgrade:  # taken after the advisory lock: a second migrate waits as before
            await conn.execute(
                "SELECT set_config('lock_timeout', %s, true)", (f"{LOCK_TIMEOUT_MS}ms",)
            )
        cur = await conn.execute("SELECT to_regnamespace('awa') IS NULL")
        schema_exists = (await cur.fetchone()) != (True,)
        if not schema_exists:
            await conn.execute(_SCHEMA)
        await conn.execute(_VERSION_TABLE)
        version = await current_version(conn)
        if version > latest_version():
            raise _too_new(version)
        for m in migrations():
            if m.version <= version:
                continue
            # Migration files are package data, never user input.
            await conn.execute(sql.SQL(_without_schema(m.sql) if schema_exists else m.sql))
            await conn.execute(
                "INSERT INTO awa.schema_version (version, name) VALUES (%s, %s)",
                (m.version, m.name),
            )
            applied.append(m.version)
    return applied


def _without_schema(text: LiteralString) -> LiteralString:
    """A migration less its ``CREATE SCHEMA IF NOT EXISTS awa`` (0001's), for a schema a
    DBA made for the owner: the statement needs CREATE on the database even when the
    schema exists, and the owner was refused on a fresh database (a review)."""
    return text.replace(_SCHEMA + ";", "-- (the schema exists)", 1)


async def check_schema(conn: AsyncConnection[Any]) -> None:
    """Raise unless the schema is exactly at this code's version."""
    version = await current_version(conn)
    latest = latest_version()
    if version < latest:
        raise SchemaNotMigrated(
            f"the awa schema is at version {version}, this code needs {latest}: "
            "run `awa migrate` (or client.migrate())"
        )
    if version > latest:
        raise SchemaTooNew(
            f"database schema is at version {version}, this awa knows up to {latest}: upgrade awa"
        )
