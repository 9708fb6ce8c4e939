"""Insert jobs inside the application's own transaction.

``insert_job(conn, args, **options)`` accepts a psycopg 3 connection (sync or async) or a
SQLAlchemy ``Session`` bound to the psycopg 3 driver (``postgresql+psycopg://``). The job
is written with the same statement and validation as ``AsyncClient.insert`` and becomes
visible only when the caller's transaction commits. With an async connection it returns
an awaitable.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import psycopg

from awa.client.insert import InsertSpec, build_spec, insert_one
from awa.db import sql
from awa.db.errors import mapped
from awa.errors import ValidationError
from awa.types import Job


def _insert_sync(conn: psycopg.Connection[Any], spec: InsertSpec) -> Job[Any]:
    with mapped():
        row = conn.execute(sql.JOB_INSERT, spec.params()).fetchone()
    return spec.inserted(row)


def _psycopg_connection_of_session(session: Any) -> psycopg.Connection[Any]:
    raw = session.connection().connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        raise ValidationError(
            "conn",
            "the SQLAlchemy session must use the psycopg 3 driver (postgresql+psycopg://), "
            f"got {type(raw).__name__}",
        )
    return raw


def insert_job(conn: Any, args: Any, **options: Any) -> Job[Any] | Awaitable[Job[Any]]:
    """Insert one job using ``conn``'s current transaction (options as ``insert``)."""
    spec = build_spec(args, **options)
    if isinstance(conn, psycopg.AsyncConnection):
        return insert_one(conn, spec)
    if isinstance(conn, psycopg.Connection):
        return _insert_sync(conn, spec)
    if hasattr(conn, "connection") and hasattr(conn, "execute"):  # a SQLAlchemy Session
        return _insert_sync(_psycopg_connection_of_session(conn), spec)
    raise ValidationError(
        "conn",
        "expected a psycopg Connection/AsyncConnection or a SQLAlchemy Session, "
        f"got {type(conn).__name__}",
    )
