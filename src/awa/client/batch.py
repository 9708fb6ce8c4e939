"""Durable batch operations: change many waiting jobs at once, safely (ADR 0028).

An operator previews an operation (:class:`MoveQueue`, :class:`SetPriority`) over a
filter — kind, queue, state, ids — then applies it. Applying records the operation and
the ids of the jobs it will visit (``batch_submit``), then carries it out chunk by chunk
(``batch_run_chunk``): each chunk changes at most ``chunk_size`` jobs and advances the
progress in one transaction, so a crash loses nothing and repeats nothing. Whoever runs
the chunks — the caller, ``run_batch`` after a crash, the maintenance leader for an
operation nobody runs — the operation row's lock keeps them in order, and
``cancel_batch`` stops it between two chunks.

Only waiting jobs change (``available``, ``scheduled``, ``retryable``): a running job's
queue and priority belong to its attempt. A job that no longer matches when its chunk
comes (it ran, was cancelled, moved) is counted as skipped.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, AsyncCursor, Cursor
from psycopg.rows import RowMaker
from psycopg_pool import AsyncConnectionPool

from awa import validate
from awa.db import sql
from awa.db.errors import mapped
from awa.db.rows import job_rows
from awa.errors import BatchNotFound, ValidationError
from awa.types import Job, JobState

WAITING_STATES = (JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE)
OPERATION_STATES = ("pending", "running", "completed", "cancelled")
MAX_CHUNK_SIZE = 10_000
MAX_IDS = 100_000
MAX_SAMPLE = 1_000


@dataclass(frozen=True, slots=True)
class MoveQueue:
    """Batch operation: move the matching waiting jobs to ``queue``."""

    queue: str

    def __post_init__(self) -> None:
        validate.name("queue", self.queue)

    def spec(self) -> dict[str, Any]:
        """How the operation is stored."""
        return {"queue": self.queue}


@dataclass(frozen=True, slots=True)
class SetPriority:
    """Batch operation: give the matching waiting jobs ``priority`` (1 highest … 4)."""

    priority: int

    def __post_init__(self) -> None:
        validate.integer("priority", self.priority, low=1, high=4)

    def spec(self) -> dict[str, Any]:
        """How the operation is stored."""
        return {"priority": self.priority}


BatchOp = MoveQueue | SetPriority


@dataclass(frozen=True, slots=True)
class BatchPreview:
    """What an operation would change now: how many jobs, and the first few by id."""

    total: int
    sample: list[Job[Any]]


@dataclass(frozen=True, slots=True)
class BatchOperation:
    """A submitted batch operation and its progress."""

    id: int
    op: str
    spec: dict[str, Any]
    filter: dict[str, Any]
    state: str  # pending, running, completed, cancelled
    chunk_size: int
    total: int  # jobs that matched when it was submitted
    processed: int  # changed so far
    skipped: int  # no longer matching when their chunk came
    cursor_id: int
    submitted_by: str | None
    created_at: datetime
    started_at: datetime | None
    updated_at: datetime
    finalized_at: datetime | None

    @property
    def done(self) -> bool:
        """True once it completed or was cancelled."""
        return self.state in ("completed", "cancelled")

    @property
    def percent(self) -> float:
        """Share of the matched jobs visited so far, 0–100."""
        if self.total == 0:
            return 100.0 if self.done else 0.0
        return 100.0 * (self.processed + self.skipped) / self.total


Progress = Callable[[BatchOperation], Any]


def _check_op(op: Any) -> BatchOp:
    if not isinstance(op, MoveQueue | SetPriority):
        raise ValidationError(
            "op", f"must be awa.MoveQueue(queue) or awa.SetPriority(priority), got {op!r}"
        )
    return op


def _states(state: JobState | str | None) -> list[str]:
    if state is None:
        return [s.value for s in WAITING_STATES]
    try:
        wanted = JobState(state)
    except ValueError:
        wanted = None
    if wanted not in WAITING_STATES:
        names = ", ".join(s.value for s in WAITING_STATES)
        raise ValidationError("state", f"batch operations change waiting jobs ({names}), "
                                       f"got {state!r}")  # fmt: skip
    assert wanted is not None
    return [wanted.value]


def _ids(ids: Sequence[int] | None) -> list[int] | None:
    return None if ids is None else validate.row_ids("ids", ids, max_count=MAX_IDS)


def selection(
    op: Any,
    *,
    kind: str | None,
    queue: str | None,
    state: JobState | str | None,
    ids: Sequence[int] | None,
) -> dict[str, Any]:
    """Validated parameters of the shared WHERE of ``batch_preview``/``batch_submit``."""
    checked = _check_op(op)
    params: dict[str, Any] = {
        "kind": None if kind is None else validate.text("kind", kind),
        "queue": None if queue is None else validate.text("queue", queue),
        "ids": _ids(ids),
        "states": _states(state),
        "to_queue": checked.queue if isinstance(checked, MoveQueue) else None,
        "to_priority": checked.priority if isinstance(checked, SetPriority) else None,
    }
    return params


def _preview_rows(cursor: Cursor[Any] | AsyncCursor[Any]) -> RowMaker[tuple[int, Job[Any]]]:
    make_job = job_rows(cursor)

    def make(values: Sequence[Any]) -> tuple[int, Job[Any]]:
        return int(values[0]), make_job(values)

    return make


async def preview(
    conn: AsyncConnection[Any],
    op: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    ids: Sequence[int] | None = None,
    sample: int = 20,
) -> BatchPreview:
    """How many jobs ``op`` would change now, and the first ``sample`` of them by id."""
    params = selection(op, kind=kind, queue=queue, state=state, ids=ids)
    params["sample"] = validate.integer("sample", sample, low=1, high=MAX_SAMPLE)
    with mapped():
        cur = conn.cursor(row_factory=_preview_rows)
        await cur.execute(sql.BATCH_PREVIEW, params)
        rows = await cur.fetchall()
    return BatchPreview(rows[0][0] if rows else 0, [job for _, job in rows])


async def submit(
    conn: AsyncConnection[Any],
    op: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    ids: Sequence[int] | None = None,
    chunk_size: int = 1_000,
    submitted_by: str | None = None,
    allow_all: bool = False,
) -> BatchOperation:
    """Record ``op`` and the jobs it will visit; it is ``pending`` until a chunk runs."""
    params = selection(op, kind=kind, queue=queue, state=state, ids=ids)
    validate.filtered_or_allowed(
        kind is None and queue is None and ids is None and state is None, allow_all,
        "refusing to change every waiting job of every queue: pass kind=, queue=, state= or "
        "ids=, or allow_all=True",
    )  # fmt: skip
    stored_filter = {"kind": params["kind"], "queue": params["queue"], "ids": params["ids"],
                     "states": params["states"]}  # fmt: skip
    params.update(
        op="move_queue" if isinstance(op, MoveQueue) else "set_priority",
        spec=json.dumps(_check_op(op).spec()),
        filter=json.dumps(stored_filter),
        chunk_size=validate.integer("chunk_size", chunk_size, low=1, high=MAX_CHUNK_SIZE),
        submitted_by=None if submitted_by is None else validate.text("submitted_by", submitted_by),
    )
    with mapped():
        cur = conn.cursor(row_factory=_picked_rows)
        await cur.execute(sql.BATCH_SUBMIT, params)
        row = await cur.fetchone()
    assert row is not None  # INSERT … RETURNING yields its row
    return row


def _picked_rows(cursor: Cursor[Any] | AsyncCursor[Any]) -> RowMaker[BatchOperation]:
    """``awa.batch_operations`` rows (extra columns, e.g. ``notified``, ignored) →
    BatchOperation."""
    names = [c.name for c in cursor.description or ()]
    wanted = [(i, n) for i, n in enumerate(names) if n in BatchOperation.__dataclass_fields__]

    def make(values: Sequence[Any]) -> BatchOperation:
        return BatchOperation(**{name: values[i] for i, name in wanted})

    return make


def _operation_id(value: Any) -> int:
    return validate.row_id("operation_id", value)


async def get(conn: AsyncConnection[Any], operation_id: int) -> BatchOperation:
    """The operation with ``operation_id``, or :class:`BatchNotFound`."""
    key = _operation_id(operation_id)
    with mapped():
        cur = conn.cursor(row_factory=_picked_rows)
        await cur.execute(sql.BATCH_GET, {"id": key})
        found = await cur.fetchone()
    if found is None:
        raise BatchNotFound(key)
    return found


async def list_operations(
    conn: AsyncConnection[Any], *, state: str | None = None, limit: int = 50
) -> list[BatchOperation]:
    """Operations newest first, optionally of one state."""
    if state is not None and state not in OPERATION_STATES:
        raise ValidationError("state", f"must be one of {', '.join(OPERATION_STATES)}, "
                                       f"got {state!r}")  # fmt: skip
    params = {"state": state, "limit": validate.integer("limit", limit, low=1, high=10_000)}
    with mapped():
        cur = conn.cursor(row_factory=_picked_rows)
        await cur.execute(sql.BATCH_LIST, params)
        return await cur.fetchall()


async def run_chunk(conn: AsyncConnection[Any], operation_id: int) -> BatchOperation | None:
    """Carry out the next chunk; the operation as it now is, or None when it is not open."""
    with mapped():
        cur = conn.cursor(row_factory=_picked_rows)
        await cur.execute(sql.BATCH_RUN_CHUNK, {"id": _operation_id(operation_id)})
        return await cur.fetchone()


async def cancel(conn: AsyncConnection[Any], operation_id: int) -> BatchOperation:
    """Stop the operation after the chunk in flight; the operation as it now is."""
    key = _operation_id(operation_id)
    with mapped():
        cur = conn.cursor(row_factory=_picked_rows)
        await cur.execute(sql.BATCH_CANCEL, {"id": key})
        cancelled = await cur.fetchone()
    return cancelled if cancelled is not None else await get(conn, key)


async def run(
    pool: AsyncConnectionPool,
    operation_id: int,
    *,
    on_progress: Progress | None = None,
    max_chunks: int | None = None,
) -> BatchOperation:
    """Run chunks until the operation ends (or ``max_chunks`` ran); returns it as it is.

    ``on_progress(operation)`` is called after each chunk (it may be async).
    """
    ran = 0
    while max_chunks is None or ran < max_chunks:
        async with pool.connection() as conn:
            current = await run_chunk(conn, operation_id)
        ran += 1
        if current is None:  # ended meanwhile: cancelled, or finished by another runner
            break
        if on_progress is not None:
            result = on_progress(current)
            if inspect.isawaitable(result):
                await result
        if current.done:
            return current
    async with pool.connection() as conn:
        return await get(conn, operation_id)


async def run_stalled(
    pool: AsyncConnectionPool,
    *,
    stale_ms: int,
    carrying: Collection[int] = (),
    max_chunks: int = 100,
) -> list[BatchOperation]:
    """The leader's share: carry on open operations nobody advances, and those it
    advanced at its previous call (``carrying``), a bounded amount per call so one huge
    operation cannot hold the service; returns what it advanced."""
    params = {"stale_ms": stale_ms, "carrying": list(carrying), "limit": 10}
    async with pool.connection() as conn:
        cur = await conn.execute(sql.BATCH_LIST_STALLED, params)
        ids = [row[0] for row in await cur.fetchall()]
    return [await run(pool, op_id, max_chunks=max_chunks) for op_id in ids]
