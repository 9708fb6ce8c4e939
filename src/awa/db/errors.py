"""The one place where driver errors become awa errors.

Every database call of the client and the worker runs inside :func:`mapped`, so callers
only ever see the :mod:`awa.errors` tree.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import errors as pg

from awa.errors import DatabaseError, SchemaNotMigrated, UniqueConflict, ValidationError

# A unique violation's detail: Key (unique_key)=(\x0a1b…) already exists.
_KEY_IN_DETAIL = re.compile(r"\(unique_key\)=\(\\x([0-9a-f]+)\)")
_MIGRATE_HINT = "the awa schema is missing or out of date: run `awa migrate` (or client.migrate())"


def translate(exc: psycopg.Error) -> Exception:
    """The awa error that stands for ``exc``."""
    if isinstance(exc, pg.UndefinedTable | pg.InvalidSchemaName | pg.UndefinedObject):
        return SchemaNotMigrated(f"{_MIGRATE_HINT} ({exc.diag.message_primary})")
    if isinstance(exc, pg.UndefinedColumn | pg.UndefinedFunction):
        return SchemaNotMigrated(f"{_MIGRATE_HINT} ({exc.diag.message_primary})")
    if isinstance(exc, pg.UniqueViolation) and exc.diag.constraint_name == "jobs_unique_idx":
        detail = exc.diag.message_detail or ""
        key = _KEY_IN_DETAIL.search(detail)
        return UniqueConflict(
            "a job with the same unique key already exists in a guarded state "
            f"({detail or 'duplicate unique_key'})",
            unique_key=bytes.fromhex(key.group(1)) if key else None,
        )
    if isinstance(exc, pg.CheckViolation):
        constraint = exc.diag.constraint_name or "check"
        return ValidationError(constraint, exc.diag.message_primary or str(exc))
    if isinstance(exc, pg.ProgramLimitExceeded | pg.StringDataRightTruncation):
        return ValidationError("value", exc.diag.message_primary or str(exc))
    return DatabaseError(f"{type(exc).__name__}: {exc}".strip())


class _Mapped:
    """The context manager :func:`mapped` returns. A class rather than a generator
    (@contextmanager): it is entered on every database call, and a generator-based one
    costs ~1.5 µs more each time; it holds no state, so one instance serves everyone."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if isinstance(exc, psycopg.Error):
            raise translate(exc) from exc


_MAPPED = _Mapped()


def mapped() -> _Mapped:
    """Re-raise driver errors as awa errors (works around sync and async code alike)."""
    return _MAPPED
