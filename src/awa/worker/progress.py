"""Progress, checkpoints and metadata updates of running jobs, and callback registration.

A handler calls ``job.set_progress(...)`` / ``job.update_metadata(...)``; the values are
kept on the job (:class:`Updates`) and written without any round trip of their own:

* every heartbeat interval, ONE batched statement (``job_progress_many``) writes the
  attempts whose values changed since the last write — none when nothing changed;
* the attempt's outcome carries them in ``job_finalize_many`` (the completer asks
  :func:`finalize_values`), so the row's last state change always has the latest values;
* ``await job.flush_progress()`` writes one job at once, when a handler asks for it.

Writes are lease-guarded like every write of an attempt. Progress replaces the stored
value and metadata is merged (``||``) with everything this attempt updated, so writing
the same snapshot twice is harmless and a heartbeat racing the outcome cannot lose a
value: the outcome always carries the full snapshot, not only what changed since.

Handlers of either kind call these methods: plain ``def`` handlers run in threads, so the
state is guarded by a lock and the ``*_sync`` variants hop onto the worker's loop.
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from awa import validate
from awa.db import sql
from awa.errors import AwaError, ValidationError
from awa.serialization import encode_bounded, encode_json
from awa.types import _KEEP, Job

R = TypeVar("R")


class Updates:
    """What one attempt changed: full progress snapshot, cumulative metadata patch."""

    __slots__ = ("callback_id", "lock", "metadata_patch", "progress_set", "version", "written")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress_set = False
        self.metadata_patch: dict[str, Any] = {}
        self.version = 0
        self.written = 0
        self.callback_id: str | None = None

    @property
    def dirty(self) -> bool:
        """True when something changed since the last successful write."""
        return self.version > self.written


def updates_of(job: Job[Any]) -> Updates:
    """The job's update state (created on first use)."""
    if job._updates is None:
        job._updates = Updates()
    updates: Updates = job._updates
    return updates


def snapshot(job: Job[Any]) -> tuple[str | None, str | None, int]:
    """(progress JSON or None, metadata patch JSON or None, version) of this attempt."""
    updates = job._updates
    if not isinstance(updates, Updates):
        return None, None, 0
    with updates.lock:
        progress = encode_json(job.progress, what="progress") if updates.progress_set else None
        patch = updates.metadata_patch
        metadata = encode_json(patch, what="metadata") if patch else None
        return progress, metadata, updates.version


def finalize_values(jobs: Iterable[Job[Any] | None]) -> tuple[list[str | None], list[str | None]]:
    """The ``progress`` and ``metadata`` arrays of ``job_finalize_many`` for a batch."""
    progress: list[str | None] = []
    metadata: list[str | None] = []
    for job in jobs:
        p, m, _ = snapshot(job) if job is not None else (None, None, 0)
        progress.append(p)
        metadata.append(m)
    return progress, metadata


def with_updates(record: dict[str, Any], job: Job[Any] | None) -> dict[str, Any]:
    """A ``job_finalize_many`` record plus the attempt's progress and metadata, if any."""
    updates = job._updates if job is not None else None
    if isinstance(updates, Updates) and job is not None:
        with updates.lock:
            if updates.progress_set:
                record["progress"] = job.progress
            if updates.metadata_patch:
                record["metadata"] = dict(updates.metadata_patch)
    return record


def _mark_written(job: Job[Any], version: int) -> None:
    updates = job._updates
    if isinstance(updates, Updates):
        with updates.lock:
            updates.written = max(updates.written, version)


def _check_percent(percent: Any) -> float:
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        raise ValidationError("percent", f"must be a number from 0 to 100, got {percent!r}")
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        raise ValidationError("percent", f"must be a number from 0 to 100, got {percent!r}")
    return float(percent)


class JobServices:
    """What handlers reach through ``job.set_progress`` and friends, for one worker."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Remember the worker's loop (the sync variants run their I/O there)."""
        self._loop = loop

    def _on_loop(self, coro: Coroutine[Any, Any, R]) -> R:
        if self._loop is None:
            coro.close()
            raise RuntimeError("the worker is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise RuntimeError("use the async method inside an async handler (await it)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- progress and metadata -------------------------------------------------------

    def set_progress(
        self, job: Job[Any], percent: float, message: str | None, checkpoint: Any
    ) -> None:
        """Record progress on the job (and a checkpoint unless ``_KEEP``)."""
        value: dict[str, Any] = {"percent": _check_percent(percent)}
        if message is not None:
            value["message"] = validate.text("message", message, max_length=10_000)
        previous = job.progress or {}
        if checkpoint is _KEEP:
            if "checkpoint" in previous:
                value["checkpoint"] = previous["checkpoint"]
        elif checkpoint is not None:
            value["checkpoint"] = checkpoint
        encode_bounded(value, what="progress")  # refuse what cannot be stored, at the call
        updates = updates_of(job)
        with updates.lock:
            job.progress = value
            updates.progress_set = True
            updates.version += 1

    def update_metadata(self, job: Job[Any], patch: Mapping[str, Any]) -> None:
        """Merge ``patch`` into the job's metadata."""
        if not isinstance(patch, Mapping):
            raise ValidationError("metadata", f"must be a dict, got {type(patch).__name__}")
        # The job's whole metadata after the merge must fit, not just this patch.
        encode_bounded({**job.metadata, **patch}, what="metadata")
        updates = updates_of(job)
        with updates.lock:
            job.metadata = {**job.metadata, **patch}
            updates.metadata_patch.update(patch)
            updates.version += 1

    async def flush(self, job: Job[Any]) -> bool:
        """Write this job's progress and metadata now (lease-guarded)."""
        if not isinstance(job._updates, Updates):
            return True  # nothing was ever set: nothing to write
        written = await write_many(self._pool, [job], force=True)
        return job.id in written

    def flush_sync(self, job: Job[Any]) -> bool:
        """:meth:`flush` from a handler thread."""
        return self._on_loop(self.flush(job))

    # -- callbacks -------------------------------------------------------------------

    async def register_callback(self, job: Job[Any], timeout_seconds: float) -> str:
        """Give this attempt a fresh callback id and timeout; returns the id."""
        timeout = validate.number("timeout_seconds", timeout_seconds, above=0)
        callback_id = str(uuid.uuid4())
        params = {
            "id": job.id,
            "run_lease": job.run_lease,
            "attempted_at": job.attempted_at,
            "callback_id": callback_id,
            "timeout_ms": int(timeout * 1000),
        }
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.JOB_REGISTER_CALLBACK, params)
            row = await cur.fetchone()
        if row is None:
            raise AwaError(f"job {job.id} is no longer running under this attempt (lease lost)")
        updates = updates_of(job)
        with updates.lock:
            updates.callback_id = callback_id
        return callback_id

    def register_callback_sync(self, job: Job[Any], timeout_seconds: float) -> str:
        """:meth:`register_callback` from a handler thread."""
        return self._on_loop(self.register_callback(job, timeout_seconds))


def registered_callback_id(job: Job[Any]) -> str | None:
    """The callback id this attempt registered, if any."""
    updates = job._updates
    return updates.callback_id if isinstance(updates, Updates) else None


async def write_many(
    pool: AsyncConnectionPool, jobs: Iterable[Job[Any]], *, force: bool = False
) -> set[int]:
    """Write the changed progress/metadata of running jobs in one statement.

    Returns the ids whose row was updated (an id missing: that attempt lost its lease).
    """
    ids: list[int] = []
    leases: list[int] = []
    attempted: list[Any] = []
    progress: list[str | None] = []
    metadata: list[str | None] = []
    versions: dict[int, tuple[Job[Any], int]] = {}
    for job in jobs:
        updates = job._updates
        if not isinstance(updates, Updates) or not (updates.dirty or force):
            continue
        p, m, version = snapshot(job)
        ids.append(job.id)
        leases.append(job.run_lease)
        attempted.append(job.attempted_at)
        progress.append(p)
        metadata.append(m)
        versions[job.id] = (job, version)
    if not ids:
        return set()
    params = {
        "ids": ids,
        "run_leases": leases,
        "attempted_ats": attempted,
        "progress": progress,
        "metadata": metadata,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(sql.JOB_PROGRESS_MANY, params)
        written = {row[0] for row in await cur.fetchall()}
    for job_id in written:
        job, version = versions[job_id]
        _mark_written(job, version)
    return written
