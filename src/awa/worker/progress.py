"""Progress, checkpoints and metadata updates of running attempts.

A handler calls ``job.set_progress(...)`` / ``job.update_metadata(...)``; its attempt
keeps what changed in an :class:`Updates` and the values are written without any round
trip of their own:

* every heartbeat interval, ONE batched statement (``job_progress_many``, via
  :func:`write_many`) writes the attempts whose values changed since the last write —
  none when nothing changed;
* the attempt's outcome carries them in ``job_finalize_many`` (the attempt attaches
  :meth:`Updates.final` to its outcome), so the row's last state change always has the
  latest values;
* ``await job.flush_progress()`` writes one attempt at once, when a handler asks for it.

Writes are lease-guarded like every write of an attempt. Progress replaces the stored
value and metadata is merged (``||``) with everything this attempt updated, so writing
the same snapshot twice is harmless and a heartbeat racing the outcome cannot lose a
value: the outcome always carries the full snapshot, not only what changed since.

What is written is the value at the call, encoded then: a checkpoint object the handler
changes afterwards (or one only ``awa``'s encoder knows, a dataclass or an enum) never
reaches the outcome's or the heartbeat's statement, where one unstorable value would fail
the write of every other job's outcome too.

Handlers of either kind call these methods: plain ``def`` handlers run in threads, so the
state is guarded by a lock.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from awa import validate
from awa.db import sql
from awa.errors import ValidationError
from awa.serialization import encode_bounded, encode_json
from awa.types import KEEP_CHECKPOINT, Job

if TYPE_CHECKING:
    from awa.worker.attempt import Attempt

# job.flush_progress() on a row another transaction holds: tried again after 50 ms,
# doubling up to a second.
HELD_RETRY_S = 0.05
HELD_RETRY_MAX_S = 1.0


def _check_percent(percent: Any) -> float:
    """A percentage clamped to 0–100: a handler that overshoots (101 of 100 items) must not
    lose its attempt over a progress bar. Only what is not a number at all is refused."""
    if isinstance(percent, bool) or not isinstance(percent, int | float) or math.isnan(percent):
        raise ValidationError("percent", f"must be a number from 0 to 100, got {percent!r}")
    return min(max(float(percent), 0.0), 100.0)


class Updates:
    """What one attempt changed: full progress snapshot, cumulative metadata patch.

    The values the handler sees live on its :class:`~awa.types.Job` (``job.progress``,
    ``job.metadata``); this records which of them must be written, and how far the
    writes have got (``version`` against ``written``).
    """

    __slots__ = ("_job", "_lock", "_metadata_patch", "_progress_json", "_version", "_written")

    def __init__(self, job: Job[Any]) -> None:
        self._job = job
        self._lock = threading.Lock()
        self._progress_json: str | None = None  # the snapshot to write, encoded at the call
        self._metadata_patch: dict[str, Any] = {}  # JSON values only (decoded snapshots)
        self._version = 0
        self._written = 0

    @property
    def dirty(self) -> bool:
        """True when something changed since the last successful write."""
        return self._version > self._written

    @property
    def touched(self) -> bool:
        """True once the handler recorded anything."""
        return self._version > 0

    def set_progress(self, percent: float, message: str | None, checkpoint: Any) -> None:
        """Record progress (and a checkpoint unless ``KEEP_CHECKPOINT``) on the job."""
        value: dict[str, Any] = {"percent": _check_percent(percent)}
        if message is not None:
            value["message"] = validate.text("message", message, max_length=10_000)
        job = self._job
        with self._lock:  # the last value stored, not the handler's object as it is now
            stored = self._progress_json
        previous = json.loads(stored) if stored is not None else (job.progress or {})
        if checkpoint is KEEP_CHECKPOINT:
            if "checkpoint" in previous:
                value["checkpoint"] = previous["checkpoint"]
        elif checkpoint is not None:
            value["checkpoint"] = checkpoint
        # Refuse what cannot be stored at the call, and keep what is stored as it is now.
        text = encode_bounded(value, what="progress")
        with self._lock:
            job.progress = value
            self._progress_json = text
            self._version += 1

    def update_metadata(self, patch: Mapping[str, Any]) -> None:
        """Merge ``patch`` into the job's metadata."""
        if not isinstance(patch, Mapping):
            raise ValidationError("metadata", f"must be a dict, got {type(patch).__name__}")
        snapshot = json.loads(encode_json(patch, what="metadata"))
        encode_bounded({**self._job.metadata, **snapshot}, what="metadata")
        with self._lock:
            self._job.metadata = {**self._job.metadata, **patch}
            self._metadata_patch.update(snapshot)
            self._version += 1

    def pending(self) -> tuple[str | None, str | None, int]:
        """(progress JSON or None, metadata patch JSON or None, version) to write now."""
        with self._lock:
            patch = dict(self._metadata_patch) if self._metadata_patch else None
            return self._progress_json, json.dumps(patch) if patch else None, self._version

    def final(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(progress, metadata patch) for the outcome; None where nothing was set."""
        with self._lock:
            text = self._progress_json
            patch = dict(self._metadata_patch) if self._metadata_patch else None
        return (json.loads(text) if text is not None else None), patch

    def mark_written(self, version: int) -> None:
        """Everything up to ``version`` is stored."""
        with self._lock:
            self._written = max(self._written, version)


async def write_many(
    pool: AsyncConnectionPool, attempts: Iterable[Attempt], *, force: bool = False
) -> set[int]:
    """Write the changed progress/metadata of running attempts in one statement.

    ``force`` writes every attempt that recorded anything, changed or not. Returns the
    ids whose row was updated; an id missing lost its lease, or its row was held by
    another transaction (skipped, not waited for: it stays to write next time).
    """
    written, _ = await _write(pool, attempts, force)
    return written


async def write_one(pool: AsyncConnectionPool, attempt: Attempt) -> bool:
    """Write ``attempt``'s progress and metadata now (``job.flush_progress()``): False
    when it lost its lease. A row another transaction holds is waited for, as the
    handler asked for this write."""
    return attempt.key[0] in await write_waiting(pool, [attempt], force=True)


async def write_waiting(
    pool: AsyncConnectionPool, attempts: Iterable[Attempt], *, force: bool = False
) -> set[int]:
    """:func:`write_many`, waiting for rows another transaction holds (tried again after
    50 ms, doubling up to a second) — for a write that must land before what follows it:
    a handler's own flush, the shutdown's before its fence (which waits for the row, and
    overtook a skipped write: the retry resumed from an older checkpoint, a review)."""
    pending, done, wait_s = list(attempts), set[int](), HELD_RETRY_S
    while True:
        written, held = await _write(pool, pending, force)
        done |= written
        if not held:
            return done
        pending = [attempt for attempt in pending if attempt.key[0] in held]
        await asyncio.sleep(wait_s)
        wait_s = min(wait_s * 2, HELD_RETRY_MAX_S)


async def _write(
    pool: AsyncConnectionPool, attempts: Iterable[Attempt], force: bool
) -> tuple[set[int], set[int]]:
    ids: list[int] = []
    leases: list[int] = []
    attempted: list[Any] = []
    progress: list[str | None] = []
    metadata: list[str | None] = []
    versions: dict[int, tuple[Updates, int]] = {}
    for attempt in attempts:
        updates = attempt.updates
        if not (updates.dirty or (force and updates.touched)):
            continue
        p, m, version = updates.pending()
        job_id, lease, attempted_at = attempt.key
        ids.append(job_id)
        leases.append(lease)
        attempted.append(attempted_at)
        progress.append(p)
        metadata.append(m)
        versions[job_id] = (updates, version)
    if not ids:
        return set(), set()
    params = {
        "ids": ids,
        "run_leases": leases,
        "attempted_ats": attempted,
        "progress": progress,
        "metadata": metadata,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(sql.JOB_PROGRESS_MANY, params)
        rows = await cur.fetchall()
    written = {job_id for job_id, held in rows if not held}
    for job_id in written:
        updates, version = versions[job_id]
        updates.mark_written(version)
    return written, {job_id for job_id, held in rows if held}
