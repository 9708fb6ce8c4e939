"""Admin operations on jobs and queues. Each takes a connection and is one statement."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, LiteralString, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa import override_keys, validate
from awa.client.unique import UniqueOpts, raise_naming_the_holder, warn_held_back
from awa.db import sql
from awa.db.errors import mapped
from awa.db.rows import job_rows, job_summary, queue_stat, runtime_overrides
from awa.errors import JobNotFound, UniqueConflict, ValidationError
from awa.kinds import derive_kind
from awa.serialization import args_to_dict, encode_json
from awa.types import (
    Job,
    JobState,
    JobSummary,
    QueueStat,
    RuntimeInstance,
    RuntimeOverrides,
    RuntimeSnapshot,
)
from awa.worker.snapshot import snapshot_from_json

T = TypeVar("T")
MAX_LIST_LIMIT = 10_000
MAX_FRESH_MS = validate.MAX_DURATION_MS  # well inside the interval arithmetic


def _state(value: JobState | str | None) -> str | None:
    if value is None:
        return None
    try:
        return JobState(value).value
    except ValueError:
        valid = ", ".join(s.value for s in JobState)
        raise ValidationError("state", f"unknown state {value!r} (valid: {valid})") from None


def _job_id(value: Any) -> int:
    return validate.integer("id", value, low=1)


async def _one_job(
    conn: AsyncConnection[Any], query: LiteralString, params: Mapping[str, Any]
) -> Job[Any] | None:
    with mapped():
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(query, params)
        return await cur.fetchone()


async def _many_jobs(
    conn: AsyncConnection[Any],
    query: LiteralString,
    params: Mapping[str, Any],
    prepare: bool | None = None,
) -> list[Job[Any]]:
    with mapped():
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(query, params, prepare=prepare)
        return await cur.fetchall()


async def get_job(conn: AsyncConnection[Any], job_id: int) -> Job[Any]:
    """The job with ``job_id``, or :class:`JobNotFound`."""
    job = await _one_job(conn, sql.JOB_GET, {"id": _job_id(job_id)})
    if job is None:
        raise JobNotFound(job_id)
    return job


async def list_jobs(
    conn: AsyncConnection[Any],
    *,
    state: JobState | str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    limit: int = 100,
) -> list[Job[Any]]:
    """Newest first, filtered by state, kind and queue; ``limit`` up to 10 000."""
    params = _list_filters(state, kind, queue, limit)
    query = sql.job_list(summaries=False, given=_given(params))
    return await _many_jobs(conn, query, params, prepare=False)


async def list_job_summaries(
    conn: AsyncConnection[Any],
    *,
    state: JobState | str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    limit: int = 100,
) -> list[JobSummary]:
    """:func:`list_jobs` without the payload: what a listing shows."""
    params = _list_filters(state, kind, queue, limit)
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.job_list(summaries=True, given=_given(params)), params, prepare=False)
        return [job_summary(row) for row in await cur.fetchall()]


def _given(params: Mapping[str, Any]) -> frozenset[str]:
    """The listing's filters given a value: only those are in its statement, planned for
    their values each time (``prepare=False``) so that a state's or a queue's partial
    index serves it (see job_list.sql)."""
    return frozenset(name for name in sql.LIST_FILTERS if params[name] is not None)


def _list_filters(
    state: JobState | str | None, kind: str | None, queue: str | None, limit: int
) -> dict[str, Any]:
    return {
        "state": _state(state),
        "kind": None if kind is None else validate.text("kind", kind),
        "queue": None if queue is None else validate.text("queue", queue),
        "limit": validate.integer("limit", limit, low=1, high=MAX_LIST_LIMIT),
    }


async def _changed_or_current(
    conn: AsyncConnection[Any], query: LiteralString, job_id: int, **extra: Any
) -> Job[Any]:
    job = await _one_job(conn, query, {"id": _job_id(job_id), **extra})
    return job if job is not None else await get_job(conn, job_id)


async def cancel(
    conn: AsyncConnection[Any], job_id: int, reason: str = "cancelled by operator"
) -> Job[Any]:
    """Cancel a job that has not finished (a running one too); returns it as it now is."""
    return await _changed_or_current(conn, sql.JOB_CANCEL, job_id, reason=reason)


async def retry(conn: AsyncConnection[Any], job_id: int) -> Job[Any]:
    """Make a failed, cancelled, completed, scheduled, retryable or callback-waiting job
    available now (the waiting job's callback is voided). A finished job whose unique key
    another job has taken since raises UniqueConflict naming that job."""
    params = {"id": _job_id(job_id)}
    try:
        job = await _one_job(conn, sql.JOB_RETRY, params)
    except UniqueConflict as conflict:  # a holder that came in as the retry ran
        await raise_naming_the_holder(conn, conflict)
    if job is not None:
        return job
    with mapped():
        held_by = await (await conn.execute(sql.JOB_RETRY_HELD_BY, params)).fetchone()
    if held_by is not None:
        raise UniqueConflict("unique key held").held_by(held_by[0])
    return await get_job(conn, job_id)


async def cancel_by_unique_key(
    conn: AsyncConnection[Any],
    args: Any,
    *,
    kind: str | None = None,
    queue: str = "default",
    unique_opts: Mapping[str, Any] | UniqueOpts | None = None,
) -> Job[Any] | None:
    """Cancel the unfinished job that ``insert(args, ..., unique_opts=...)`` would collide with."""
    if kind is None:
        if isinstance(args, Mapping):
            raise ValidationError("kind", "is required when args is a dict")
        kind = derive_kind(type(args))
    opts = UniqueOpts.parse(unique_opts or {})
    key = opts.key(
        validate.text("kind", kind), validate.text("queue", queue), encode_json(args_to_dict(args))
    )
    return await _one_job(conn, sql.JOB_CANCEL_BY_UNIQUE_KEY, {"unique_key": key})


async def retry_failed(
    conn: AsyncConnection[Any], *, kind: str | None = None, queue: str | None = None
) -> list[Job[Any]]:
    """Retry every failed job of a kind and/or a queue (at least one filter is required).
    A job whose unique key another job guards now stays failed, named in a warning."""
    params = _failed_of(kind, queue)
    retried = await _past_new_holders(lambda: _many_jobs(conn, sql.JOB_RETRY_FAILED, params))
    await _warn_held_back(conn, params)
    return retried


async def retry_failed_count(
    conn: AsyncConnection[Any], *, kind: str | None = None, queue: str | None = None
) -> int:
    """:func:`retry_failed`, returning how many instead of the jobs (for a count shown)."""
    params = _failed_of(kind, queue)

    async def count() -> int:
        with mapped():
            row = await (await conn.execute(sql.JOB_RETRY_FAILED_COUNT, params)).fetchone()
        return int(row[0]) if row is not None else 0

    retried = await _past_new_holders(count)
    await _warn_held_back(conn, params)
    return retried


# The bulk retry skips the keys other jobs hold as it starts; one inserted while it runs
# (seconds, at 200 000 jobs) fails it whole. Run again, it sees that holder and skips it.
NEW_HOLDER_TRIES = 3


async def _past_new_holders(run: Callable[[], Awaitable[T]]) -> T:
    """``run()``, again when a unique key was taken while it ran (a review: a producer's
    insert during a bulk retry failed all of it, naming no job)."""
    for _ in range(NEW_HOLDER_TRIES - 1):
        with contextlib.suppress(UniqueConflict):
            return await run()
    return await run()


async def _warn_held_back(conn: AsyncConnection[Any], params: dict[str, Any]) -> None:
    await warn_held_back(conn, sql.JOB_RETRY_FAILED_HELD_BACK, params,
                         retry="retry_failed", left="failed", item="job")  # fmt: skip


def _failed_of(kind: str | None, queue: str | None) -> dict[str, Any]:
    if kind is None and queue is None:
        raise ValidationError("kind", "retry_failed needs kind= or queue= (or both)")
    return {
        "kind": None if kind is None else validate.text("kind", kind),
        "queue": None if queue is None else validate.text("queue", queue),
    }


async def discard_failed(conn: AsyncConnection[Any], kind: str) -> int:
    """Delete the failed jobs of one kind; returns how many."""
    with mapped():
        cur = await conn.execute(sql.JOB_DISCARD_FAILED, {"kind": validate.text("kind", kind)})
    return cur.rowcount


async def pause_queue(conn: AsyncConnection[Any], queue: str, paused_by: str | None = None) -> None:
    """Stop every worker from claiming jobs of ``queue`` (running ones finish)."""
    if paused_by is not None:
        paused_by = validate.text("paused_by", paused_by)
    with mapped():
        await conn.execute(
            sql.QUEUE_META_PAUSE, {"queue": validate.text("queue", queue), "paused_by": paused_by}
        )


async def resume_queue(conn: AsyncConnection[Any], queue: str) -> None:
    """Let workers claim jobs of ``queue`` again (its control row goes if that leaves it
    holding nothing: queue_meta_forget_plain.sql)."""
    name = validate.text("queue", queue)
    with mapped():
        async with conn.transaction():
            await conn.execute(sql.QUEUE_META_RESUME, {"queue": name})
            await conn.execute(sql.QUEUE_META_FORGET_PLAIN, {"queues": [name]})


async def drain_queue(conn: AsyncConnection[Any], queue: str) -> int:
    """Cancel every waiting job of ``queue`` (running jobs finish); returns how many."""
    with mapped():
        cur = await conn.execute(sql.QUEUE_DRAIN, {"queue": validate.text("queue", queue)})
    return cur.rowcount


async def queue_stats(conn: AsyncConnection[Any]) -> list[QueueStat]:
    """Counts per state for every queue, with lag and pause."""
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.QUEUE_STATS)
        return [queue_stat(row) for row in await cur.fetchall()]


async def set_runtime_overrides(
    conn: AsyncConnection[Any],
    queue: str,
    **values: Any,
) -> RuntimeOverrides:
    """Replace all of ``queue``'s overrides (None reverts a setting to its start value).
    With every value None (a clear), a queue without a control row gets none."""
    settings = override_keys.validated(values)
    clearing = all(value is None for value in settings.values())
    params = {"queue": validate.text("queue", queue) if clearing else validate.name("queue", queue)}
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        if clearing:
            async with conn.transaction():  # the row goes if that leaves it holding nothing
                await cur.execute(sql.QUEUE_META_CLEAR_OVERRIDES, params)
                row = await cur.fetchone()
                await conn.execute(sql.QUEUE_META_FORGET_PLAIN, {"queues": [params["queue"]]})
        else:
            await cur.execute(sql.QUEUE_META_SET_OVERRIDES, {**params, **settings})
            row = await cur.fetchone()
    overrides = runtime_overrides(row)
    if overrides is None:  # cleared, and nothing was ever stored
        return RuntimeOverrides(None, None, None, None, None)
    return overrides


async def queue_runtime_overrides(
    conn: AsyncConnection[Any], queue: str
) -> RuntimeOverrides | None:
    """The stored overrides of ``queue`` (None when the queue has no control row)."""
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.QUEUE_META_GET, {"queue": validate.text("queue", queue)})
        return runtime_overrides(await cur.fetchone())


async def list_runtime_instances(
    conn: AsyncConnection[Any], *, fresh_ms: int = 60_000
) -> list[RuntimeInstance]:
    """Workers that published a snapshot within ``fresh_ms``, most recent first."""
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            sql.RUNTIME_INSTANCE_LIST,
            {"fresh_ms": validate.integer("fresh_ms", fresh_ms, low=1, high=MAX_FRESH_MS)},
        )
        rows = await cur.fetchall()
    return [
        RuntimeInstance(
            instance_id=str(row["instance_id"]),
            hostname=row["hostname"],
            pid=row["pid"],
            started_at=row["started_at"],
            last_seen_at=row["last_seen_at"],
            is_leader=row["is_leader"],
            snapshot=_snapshot(row["snapshot"]),
            seen_ago_s=row["seen_ago_s"],
        )
        for row in rows
    ]


def _snapshot(data: Any) -> RuntimeSnapshot | None:
    """A published runtime snapshot, or None when there is none or it cannot be read
    (written by another version of awa, or edited by hand): one unreadable row must not
    break listing the fleet."""
    if not data:
        return None
    try:
        return snapshot_from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
