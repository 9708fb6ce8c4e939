"""From what a handler did to the row change that records it (I/O-free).

A handler returns ``None`` (completed), ``RetryAfter``, ``Snooze`` or ``Cancel``, or it
raises: ``TerminalError`` fails the job now, anything else retries with exponential
backoff until ``max_attempts`` is used up.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import socket
import traceback
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from awa.errors import TerminalError
from awa.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback
from awa.serialization import clip, storable_text
from awa.types import Job, JobState

MAX_BACKOFF_S = 24 * 3600.0
MAX_TRACEBACK_CHARS = 4_000
# An error entry is kept on the job row (the last 20 of them, ADR 0020) and read back with
# it: a 30 MB exception message once took a worker to 995 MiB.
MAX_ERROR_CHARS = 4_000
UNKNOWN_KIND_KEY = "unknown_kind"  # metadata key of a job handed back for want of a handler
MAX_HAND_BACK_S = 300.0
_warned_kinds: set[str] = set()  # kinds already logged by this process
logger = logging.getLogger("awa")


def backoff_seconds(attempt: int, rng: random.Random | None = None) -> float:
    """``2^attempt`` seconds plus up to 25 % jitter, capped at 24 h."""
    base = min(2.0 ** min(attempt, 64), MAX_BACKOFF_S)
    jitter = (rng or random).uniform(0, base * 0.25)
    return min(base + jitter, MAX_BACKOFF_S)


AttemptKey = tuple[int, int, datetime]
"""(job id, run_lease, attempted_at): what every write of one attempt must match."""


def attempt_key(job: Job[Any]) -> AttemptKey:
    """The fencing key of ``job``'s current attempt."""
    assert job.attempted_at is not None, "only claimed jobs have an attempt"
    return job.id, job.run_lease, job.attempted_at


@dataclass(slots=True)
class Finalization:
    """One row change for ``job_finalize_many.sql``: the outcome of one attempt of ``job``."""

    job: Job[Any] = field(repr=False, compare=False)
    state: JobState
    delay_ms: float | None = None
    refund: bool = False
    error: dict[str, Any] | None = None  # one entry appended to the job's errors
    # What the attempt recorded (None: nothing), attached by Attempt.outcome().
    progress: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    # No handler ran: this process has none for the kind and gave the job back (ADR 0027).
    handed_back: bool = False
    # Refused as stale because an operator cancelled the job during this attempt, after
    # its handler had returned (set by the completer when a write finds it stale).
    cancelled_first: bool = False
    # Refused by the database on its own (a value or a row it rejects) and dropped: the
    # job stays running under its lease until rescued. Not a lost lease: reported apart.
    dropped: bool = False

    @property
    def job_id(self) -> int:
        """The job's id."""
        return self.job.id

    @property
    def run_lease(self) -> int:
        """The lease of the attempt this outcome belongs to."""
        return self.job.run_lease

    def record(self) -> dict[str, Any]:
        """This outcome as one element of ``job_finalize_many``'s jsonb parameter."""
        job = self.job
        assert job.attempted_at is not None, "only claimed jobs have outcomes"
        record: dict[str, Any] = {
            "id": job.id,
            "run_lease": job.run_lease,
            "attempted_at": job.attempted_at.isoformat(),
            "state": self.state.value,
            "delay_ms": self.delay_ms,
            "refund": self.refund,
            "error": self.error,
        }
        # Absent keys keep the stored values (see job_finalize_many.sql).
        if self.progress is not None:
            record["progress"] = self.progress
        if self.metadata is not None:
            record["metadata"] = self.metadata
        return record

    @property
    def is_final(self) -> bool:
        """True when the job will not run again."""
        return self.state.is_final


def _text(value: Any) -> str:
    """``str(value)``, or a note saying it failed: an exception whose ``__str__`` raises
    must still be recorded as the handler's failure, not break the attempt's outcome."""
    try:
        return str(value)
    except BaseException as exc:  # a __str__ raising KeyboardInterrupt stopped the worker
        return f"<{type(value).__name__}: str() failed with {type(exc).__name__}>"


def _error_entry(job: Job[Any], message: str, kind: str, tb: str | None = None) -> dict[str, Any]:
    # storable_text: a NUL or an unpaired surrogate in an exception message would make
    # PostgreSQL refuse the whole batch of outcomes this entry is written with.
    entry: dict[str, Any] = {
        "error": storable_text(clip(_text(message), MAX_ERROR_CHARS)),
        "attempt": job.attempt,
        "type": storable_text(str(kind)),
    }
    if tb:
        entry["traceback"] = storable_text(tb[-MAX_TRACEBACK_CHARS:])
    return entry


def _retry_or_fail(job: Job[Any], delay_s: float, error: dict[str, Any]) -> Finalization:
    if job.attempt >= job.max_attempts:
        return Finalization(job, JobState.FAILED, error=error)
    return Finalization(job, JobState.RETRYABLE, delay_s * 1000, error=error)


def from_return(job: Job[Any], value: Any, callback_id: str | None = None) -> Finalization:
    """What a handler's return value means for its job (``callback_id``: the one the
    attempt registered, if any)."""
    if value is None:
        return Finalization(job, JobState.COMPLETED)
    if isinstance(value, RetryAfter):
        message = f"retry requested after {value.seconds:g}s"
        return _retry_or_fail(job, value.seconds, _error_entry(job, message, "RetryAfter"))
    if isinstance(value, Snooze):
        return Finalization(job, JobState.SCHEDULED, value.seconds * 1000, refund=True)
    if isinstance(value, Cancel):
        error = _error_entry(job, value.reason, "Cancel")
        return Finalization(job, JobState.CANCELLED, error=error)
    if isinstance(value, WaitForCallback):
        return _wait_for_callback(job, value, callback_id)
    mistake = _returned_by_mistake(value)
    if mistake is not None:
        return from_exception(job, TypeError(mistake))
    # Anything else is treated as success: handlers often return incidental values.
    return Finalization(job, JobState.COMPLETED)


_OUTCOMES = (RetryAfter, Snooze, Cancel, WaitForCallback)


def _returned_by_mistake(value: Any) -> str | None:
    """Why ``value`` cannot be what the handler meant to return, or None. Taken for a
    success, each of these completed the job without its work: a coroutine never awaited
    (``return send(job)``, or an async function under a plain decorator, which awa runs
    as a ``def``) and an outcome class instead of an instance (``return awa.Cancel``)."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never to run: no "never awaited" warning naming no job
        return (
            f"the handler returned {type(value).__name__} {value!r} without awaiting it, "
            "so its work did not run (an async function under a plain decorator? await "
            "it, or make the wrapper async)"
        )
    if isinstance(value, type) and issubclass(value, _OUTCOMES):
        return (
            f"the handler returned the class awa.{value.__name__}, not an instance: "
            f"return awa.{value.__name__}(...)"
        )
    return None


def from_exception(job: Job[Any], exc: BaseException) -> Finalization:
    """What a handler's exception means for its job."""
    message = _text(exc) or type(exc).__name__
    kind = type(exc).__qualname__
    if len(message) > MAX_ERROR_CHARS:  # keep the frames, not the tail of a huge message
        frames = "".join(traceback.format_tb(exc.__traceback__))
        tb = f"{frames}{kind}: {clip(message, 200)}\n"
    else:
        try:
            tb = "".join(traceback.format_exception(exc))
        except BaseException:  # str() of the exception (or of one it chains) raised
            frames = "".join(traceback.format_tb(exc.__traceback__))
            tb = f"{frames}{kind}: {message}\n"
    error = _error_entry(job, message, kind, tb)
    if isinstance(exc, TerminalError):
        return Finalization(job, JobState.FAILED, error=error)
    return _retry_or_fail(job, backoff_seconds(job.attempt), error)


def failure(job: Job[Any], message: str, kind: str, *, terminal: bool) -> Finalization:
    """A failure the worker detected itself (unknown kind, deadline, undecodable args)."""
    error = _error_entry(job, message, kind)
    if terminal:
        return Finalization(job, JobState.FAILED, error=error)
    return _retry_or_fail(job, backoff_seconds(job.attempt), error)


def handed_back(job: Job[Any]) -> Finalization:
    """A job whose kind this process has no handler for: back in line, attempt refunded.

    The job is not this process's to fail: another process (or the next release of this
    one) may run it. It goes back to ``scheduled`` with a backoff that doubles with each
    hand-back (5 s … 5 min), so a fleet where nobody can run it does not spin. The count
    and who handed it back go to ``metadata.unknown_kind``; ``errors`` gets one entry, on
    the first hand-back only, so a job that waits through a long rollout stays small.
    """
    previous = job.metadata.get(UNKNOWN_KIND_KEY) if isinstance(job.metadata, dict) else None
    count = (previous.get("count", 0) if isinstance(previous, dict) else 0) + 1
    delay_s = min(5.0 * 2 ** min(count - 1, 16), MAX_HAND_BACK_S)
    mark = {"count": count, "backoff_s": delay_s, "host": socket.gethostname(), "pid": os.getpid()}
    error = None
    if count == 1:
        message = f"unknown job kind: {job.kind} (no handler in this process; handed back)"
        error = _error_entry(job, message, "UnknownJobKind")
    if job.kind not in _warned_kinds:
        _warned_kinds.add(job.kind)
        logger.warning(
            "awa: no handler for job kind %r in this process; its jobs are handed back for "
            "a process that has one (is the module defining it imported here?)", job.kind,
            extra={"event": "unknown_kind", "kind": job.kind, "job_id": job.id},
        )  # fmt: skip
    patch = {UNKNOWN_KIND_KEY: mark}
    return Finalization(
        job,
        JobState.SCHEDULED,
        delay_s * 1000,
        refund=True,
        error=error,
        metadata=patch,
        handed_back=True,
    )


def _wait_for_callback(
    job: Job[Any], value: WaitForCallback, registered: str | None
) -> Finalization:
    """Park the job in waiting_external, if ``value`` names this attempt's callback id."""
    if registered is None or str(value.callback_id) != registered:
        message = "WaitForCallback needs the id returned by job.register_callback() in this attempt"
        return failure(job, message, "CallbackNotRegistered", terminal=True)
    return replace(from_return(job, None), state=JobState.WAITING_EXTERNAL)
