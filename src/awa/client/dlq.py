"""The dead letter queue: listing (paged by cursor), counting, retrying, purging and moving
jobs that failed for good.

On a queue started with ``QueueConfig(..., dlq=True)``, a job that fails (attempts used
up, ``TerminalError``, rescued on its last attempt, ``fail_external``, callback timeout on
its last attempt) is moved from ``awa.jobs`` to ``awa.dlq`` by a trigger, in the same
transaction as the failure (ADR 0008). Each operation here is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection, AsyncCursor, Cursor
from psycopg.rows import RowMaker

from awa import validate
from awa.client.unique import warn_held_back
from awa.db import sql
from awa.db.errors import mapped
from awa.db.rows import job_rows
from awa.errors import JobNotFound, ValidationError
from awa.types import Job
from awa.validate import BIGINT_MAX

MAX_LIST_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job in the dead letter queue: the job as it failed, why, and when it moved."""

    job: Job[Any]
    reason: str
    dlq_at: datetime

    @property
    def cursor(self) -> str:
        """Opaque position of this entry: ``list_dlq(before=entry.cursor)`` returns the
        entries listed after it (moved earlier), for paging through a large DLQ."""
        return f"{self.dlq_at.isoformat()}|{self.job.id}"


def parse_cursor(value: Any) -> tuple[datetime, int]:
    """A cursor from :attr:`DeadLetter.cursor` → (dlq_at, id), or ValidationError."""
    if isinstance(value, str):
        at, _, job_id = value.rpartition("|")
        try:
            parsed = datetime.fromisoformat(at)
            if parsed.tzinfo is not None and job_id.isdigit() and int(job_id) <= BIGINT_MAX:
                return parsed, int(job_id)
        except ValueError:
            pass
    raise ValidationError("before", f"must be a cursor from DeadLetter.cursor, got {value!r}")


def dead_letter_rows(cursor: Cursor[Any] | AsyncCursor[Any]) -> RowMaker[DeadLetter]:
    """psycopg row factory: ``awa.dlq`` rows → DeadLetter."""
    make_job = job_rows(cursor)
    names = [column.name for column in cursor.description or ()]
    reason_at, dlq_at = names.index("reason"), names.index("dlq_at")

    def make(values: Sequence[Any]) -> DeadLetter:
        return DeadLetter(make_job(values), values[reason_at], values[dlq_at])

    return make


MAX_OLDER_THAN_S = validate.MAX_DURATION_S


def _older_than_ms(value: timedelta | float | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        seconds = validate.number("older_than", value)
    if seconds < 0:
        raise ValidationError("older_than", f"must not be negative, got {value!r}")
    if seconds > MAX_OLDER_THAN_S:  # the statement takes milliseconds as a bigint
        raise ValidationError("older_than", f"must be <= {MAX_OLDER_THAN_S} seconds, got {value!r}")
    return int(seconds * 1000)


def _filter_params(
    ids: int | Sequence[int] | None,
    kind: str | None,
    queue: str | None,
    older_than: timedelta | float | None,
) -> dict[str, Any]:
    """Validated filter parameters (``ids`` one id or several)."""
    if isinstance(ids, int) and not isinstance(ids, bool):
        ids = [ids]
    return {
        "ids": None if ids is None else validate.row_ids("ids", ids),
        "kind": None if kind is None else validate.text("kind", kind),
        "queue": None if queue is None else validate.text("queue", queue),
        "older_than_ms": _older_than_ms(older_than),
    }


def filters(
    ids: int | Sequence[int] | None,
    kind: str | None,
    queue: str | None,
    older_than: timedelta | float | None,
    *,
    allow_all: bool,
) -> dict[str, Any]:
    """Validated filter parameters of a bulk action: with none given it needs
    ``allow_all=True``."""
    params = _filter_params(ids, kind, queue, older_than)
    validate.filtered_or_allowed(
        all(v is None for v in params.values()), allow_all,
        "refusing to act on the whole dead letter queue: pass ids, kind=, queue= or "
        "older_than=, or allow_all=True",
    )  # fmt: skip
    return params


async def list_dead(
    conn: AsyncConnection[Any],
    *,
    kind: str | None = None,
    queue: str | None = None,
    older_than: timedelta | float | None = None,
    limit: int = 100,
    before: str | None = None,
) -> list[DeadLetter]:
    """Dead-lettered jobs, most recently moved first; ``before`` continues after a page."""
    params = _filter_params(None, kind, queue, older_than)
    params["limit"] = validate.integer("limit", limit, low=1, high=MAX_LIST_LIMIT)
    params["before_at"], params["before_id"] = (None, None) if before is None else (
        parse_cursor(before))  # fmt: skip
    with mapped():
        cur = conn.cursor(row_factory=dead_letter_rows)
        await cur.execute(sql.DLQ_LIST, params)
        return await cur.fetchall()


async def retry(
    conn: AsyncConnection[Any],
    ids: int | Sequence[int] | None = None,
    *,
    kind: str | None = None,
    queue: str | None = None,
    older_than: timedelta | float | None = None,
    allow_all: bool = False,
) -> list[Job[Any]]:
    """Move matching jobs back to ``available`` with a fresh attempt budget. An entry whose
    unique key a live job holds stays in the DLQ, named in a warning."""
    params = filters(ids, kind, queue, older_than, allow_all=allow_all)
    with mapped():
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(sql.DLQ_RETRY, params)
        retried = await cur.fetchall()
    await _warn_held_back(conn, params)
    return retried


async def retry_count(
    conn: AsyncConnection[Any],
    ids: int | Sequence[int] | None = None,
    *,
    kind: str | None = None,
    queue: str | None = None,
    older_than: timedelta | float | None = None,
    allow_all: bool = False,
) -> int:
    """:func:`retry`, returning how many instead of the jobs (for a count shown)."""
    params = filters(ids, kind, queue, older_than, allow_all=allow_all)
    with mapped():
        row = await (await conn.execute(sql.DLQ_RETRY_COUNT, params)).fetchone()
    await _warn_held_back(conn, params)
    return int(row[0]) if row is not None else 0


async def _warn_held_back(conn: AsyncConnection[Any], params: dict[str, Any]) -> None:
    await warn_held_back(conn, sql.DLQ_HELD_BACK, params, retry="retry_from_dlq",
                         left="in the dead letter queue", item="entry")  # fmt: skip


async def purge(
    conn: AsyncConnection[Any],
    ids: int | Sequence[int] | None = None,
    *,
    kind: str | None = None,
    queue: str | None = None,
    older_than: timedelta | float | None = None,
    allow_all: bool = False,
) -> int:
    """Delete matching dead-lettered jobs; returns how many."""
    params = filters(ids, kind, queue, older_than, allow_all=allow_all)
    with mapped():
        cur = await conn.execute(sql.DLQ_PURGE, params)
    return cur.rowcount


async def get(conn: AsyncConnection[Any], job_id: int) -> DeadLetter:
    """The dead-lettered job with ``job_id``, or :class:`JobNotFound`."""
    key = validate.integer("id", job_id, low=1)
    if key > BIGINT_MAX:  # no job has it (as get_job says), rather than a database error
        raise JobNotFound(key)
    with mapped():
        cur = conn.cursor(row_factory=dead_letter_rows)
        await cur.execute(sql.DLQ_GET, {"id": key})
        dead = await cur.fetchone()
    if dead is None:
        raise JobNotFound(key)
    return dead


async def depth(conn: AsyncConnection[Any], queue: str | None = None) -> dict[str, int]:
    """Dead-lettered jobs per queue (queues with none are absent)."""
    params = {"queue": None if queue is None else validate.text("queue", queue)}
    with mapped():
        cur = await conn.execute(sql.DLQ_DEPTH, params)
        return {name: int(count) for name, count in await cur.fetchall()}


async def move_failed(
    conn: AsyncConnection[Any],
    ids: int | Sequence[int] | None = None,
    *,
    kind: str | None = None,
    queue: str | None = None,
    reason: str | None = None,
    allow_all: bool = False,
) -> int:
    """Move matching ``failed`` jobs from ``awa.jobs`` into the DLQ; returns how many."""
    params = _filter_params(ids, kind, queue, None)
    del params["older_than_ms"]
    validate.filtered_or_allowed(
        all(v is None for v in params.values()), allow_all,
        "refusing to move every failed job: pass ids, kind= or queue=, or allow_all=True",
    )  # fmt: skip
    if reason is not None:
        reason = validate.text("reason", reason, max_length=10_000)
    params["reason"] = reason
    with mapped():
        cur = await conn.execute(sql.DLQ_MOVE_FAILED, params)
    return cur.rowcount
