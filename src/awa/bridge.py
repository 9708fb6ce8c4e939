"""Insert jobs inside the application's own transaction.

``insert_job(conn, args, **options)`` accepts, on the psycopg 3 driver:

* a psycopg ``Connection`` or ``AsyncConnection``;
* a SQLAlchemy ``Session`` or ``Connection`` (engine URL ``postgresql+psycopg://``);
* a SQLAlchemy ``AsyncSession`` or ``AsyncConnection`` (the usual FastAPI set-up), and the
  ``scoped_session`` / ``async_scoped_session`` proxies of either session.

The job is written with the same statement and validation as ``AsyncClient.insert`` and
becomes visible only when the caller's transaction commits. With an async connection or
session it returns an awaitable. SQLAlchemy is imported only when a SQLAlchemy object is
passed: it is not a dependency of awa.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol, Unpack, overload

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from awa.client.insert import (
    SERIALIZATION_TRIES,
    InsertOptions,
    InsertSpec,
    alone,
    build_spec,
    guarded,
    insert_one,
    run_again,
    skipped,
    skips_duplicates,
)
from awa.client.unique import raise_naming_the_holder_sync
from awa.db import sql
from awa.db.errors import mapped
from awa.errors import DatabaseError, UniqueConflict, ValidationError
from awa.types import StoredJob
from awa.worker.registry import TaskRegistry

if TYPE_CHECKING:  # only named in signatures: SQLAlchemy is optional
    import sqlalchemy
    import sqlalchemy.ext.asyncio
    import sqlalchemy.orm

_NO_TASKS = TaskRegistry()  # without a client: the derived kind and ``default``


class HasRegistry(Protocol):
    """A client (``AsyncClient`` or ``Client``): where its tasks' jobs go by default."""

    @property
    def registry(self) -> TaskRegistry: ...


def _insert_sync(conn: psycopg.Connection[Any], spec: InsertSpec) -> StoredJob:
    """``insert_one``'s blocking twin (its cursor, row factory, savepoint and tries)."""
    tries_left = SERIALIZATION_TRIES - 1 if alone(conn) else 0
    while True:
        try:
            return _insert_sync_once(conn, spec)
        except DatabaseError as exc:
            if not run_again(exc, tries_left):
                raise
            tries_left -= 1


def _insert_sync_once(conn: psycopg.Connection[Any], spec: InsertSpec) -> StoredJob:
    savepoint = guarded(conn, spec)
    skip = skips_duplicates(spec, savepoint)
    with conn.cursor(row_factory=tuple_row) as cur:
        if savepoint:
            cur.execute(sql.INSERT_SAVEPOINT)
        try:
            with mapped():
                cur.execute(sql.JOB_INSERT_UNIQUE if skip else sql.JOB_INSERT, spec.params())
                row = cur.fetchone()
        except BaseException as exc:
            if savepoint and conn.info.transaction_status == TransactionStatus.INERROR:
                cur.execute(sql.INSERT_SAVEPOINT_ROLLBACK)
            if isinstance(exc, UniqueConflict):  # the index's, or the DLQ's check (ADR 0051)
                raise_naming_the_holder_sync(conn, exc)
            raise
        if savepoint:
            cur.execute(sql.INSERT_SAVEPOINT_RELEASE)
    if row is None:
        raise_naming_the_holder_sync(conn, skipped(spec))
    return spec.inserted(row)


def _driver(raw: Any, expected: type[Any]) -> Any:
    """The psycopg connection under a SQLAlchemy pool proxy, or ValidationError."""
    driver = getattr(raw, "driver_connection", None)
    if not isinstance(driver, expected):
        raise ValidationError(
            "conn",
            "the SQLAlchemy engine must use the psycopg 3 driver (postgresql+psycopg://), "
            f"got {type(driver).__name__}",
        )
    return driver


def _sqlalchemy_sync(conn: Any) -> psycopg.Connection[Any]:
    """The psycopg connection of a SQLAlchemy Session or Connection, inside its
    transaction (begun here when SQLAlchemy has not begun one yet, so that the caller's
    ``commit()`` covers the job)."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(conn, scoped_session):
        conn = conn()
    if isinstance(conn, Session):
        conn = conn.connection()  # begins the session's transaction if needed
    if not isinstance(conn, Connection):
        raise _unsupported(conn)
    if not conn.in_transaction():
        conn.begin()
    driver: psycopg.Connection[Any] = _driver(conn.connection, psycopg.Connection)
    return driver


async def _sqlalchemy_async(conn: Any, spec: InsertSpec) -> StoredJob:
    """Insert through the psycopg connection of an AsyncSession or AsyncConnection."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(conn, async_scoped_session):
        conn = conn()
    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    assert isinstance(conn, AsyncConnection)
    if not conn.in_transaction():
        await conn.begin()
    raw = await conn.get_raw_connection()
    driver: psycopg.AsyncConnection[Any] = _driver(raw, psycopg.AsyncConnection)
    return await insert_one(driver, spec)


def _from_sqlalchemy(conn: Any, package: str = "sqlalchemy.") -> bool:
    """True when ``conn``'s class (or a base of it: applications subclass Session) comes
    from ``package``; checked before importing anything of SQLAlchemy."""
    return any(cls.__module__.startswith(package) for cls in type(conn).__mro__)


def _is_sqlalchemy_async(conn: Any) -> bool:
    if not _from_sqlalchemy(conn, "sqlalchemy.ext.asyncio"):
        return False
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    return isinstance(conn, AsyncConnection | AsyncSession | async_scoped_session)


def _unsupported(conn: Any) -> ValidationError:
    return ValidationError(
        "conn",
        "expected a psycopg Connection/AsyncConnection or a SQLAlchemy Session, Connection, "
        f"AsyncSession or AsyncConnection, got {type(conn).__name__}",
    )


@overload
def insert_job(
    conn: psycopg.AsyncConnection[Any],
    args: Any,
    *,
    client: HasRegistry | None = None,
    **options: Unpack[InsertOptions],
) -> Awaitable[StoredJob]: ...


@overload
def insert_job(
    conn: psycopg.Connection[Any],
    args: Any,
    *,
    client: HasRegistry | None = None,
    **options: Unpack[InsertOptions],
) -> StoredJob: ...


@overload
def insert_job(
    conn: sqlalchemy.orm.Session | sqlalchemy.orm.scoped_session[Any] | sqlalchemy.Connection,
    args: Any,
    *,
    client: HasRegistry | None = None,
    **options: Unpack[InsertOptions],
) -> StoredJob: ...


@overload
def insert_job(
    conn: sqlalchemy.ext.asyncio.AsyncSession
    | sqlalchemy.ext.asyncio.async_scoped_session[Any]
    | sqlalchemy.ext.asyncio.AsyncConnection,
    args: Any,
    *,
    client: HasRegistry | None = None,
    **options: Unpack[InsertOptions],
) -> Awaitable[StoredJob]: ...


def insert_job(
    conn: Any, args: Any, *, client: HasRegistry | None = None, **options: Unpack[InsertOptions]
) -> StoredJob | Awaitable[StoredJob]:
    """Insert one job using ``conn``'s current transaction (options as ``insert``).

    With no ``queue`` (or ``queue=None``) the job goes, as with ``client.insert``, to the
    queue its task was registered on in ``client`` (an ``AsyncClient`` or ``Client``),
    else to ``default``. Returns the job, or an awaitable of it for an async connection
    or session. Bad options raise ValidationError before anything touches the connection.
    """
    registry = client.registry if client is not None else _NO_TASKS
    options["kind"], options["queue"] = registry.job_defaults(
        args, options.get("kind"), options.get("queue")
    )
    spec = build_spec(args, **options)
    if isinstance(conn, psycopg.AsyncConnection):
        return insert_one(conn, spec)
    if isinstance(conn, psycopg.Connection):
        return _insert_sync(conn, spec)
    if _is_sqlalchemy_async(conn):
        return _sqlalchemy_async(conn, spec)
    if _from_sqlalchemy(conn):
        return _insert_sync(_sqlalchemy_sync(conn), spec)
    raise _unsupported(conn)
