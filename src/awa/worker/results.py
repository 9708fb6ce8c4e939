"""From what a handler did to the row change that records it (I/O-free).

A handler returns ``None`` (completed), ``RetryAfter``, ``Snooze`` or ``Cancel``, or it
raises: ``TerminalError`` fails the job now, anything else retries with exponential
backoff until ``max_attempts`` is used up.
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from awa.errors import TerminalError
from awa.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback
from awa.types import Job, JobState

MAX_BACKOFF_S = 24 * 3600.0
MAX_TRACEBACK_CHARS = 4_000


def backoff_seconds(attempt: int, rng: random.Random | None = None) -> float:
    """``2^attempt`` seconds plus up to 25 % jitter, capped at 24 h."""
    base = min(2.0 ** min(attempt, 64), MAX_BACKOFF_S)
    jitter = (rng or random).uniform(0, base * 0.25)
    return min(base + jitter, MAX_BACKOFF_S)


@dataclass(slots=True)
class Finalization:
    """One row change for ``job_finalize_many.sql``."""

    job_id: int
    run_lease: int
    state: JobState
    delay_ms: float | None = None
    refund: bool = False
    error: str | None = None  # JSON object text, appended to errors
    job: Job[Any] | None = field(default=None, repr=False, compare=False)

    @property
    def is_final(self) -> bool:
        """True when the job will not run again."""
        return self.state.is_final


def _error_entry(job: Job[Any], message: str, kind: str, tb: str | None = None) -> str:
    entry: dict[str, Any] = {"error": message, "attempt": job.attempt, "type": kind}
    if tb:
        entry["traceback"] = tb[-MAX_TRACEBACK_CHARS:]
    return json.dumps(entry)


def _retry_or_fail(job: Job[Any], delay_s: float, error: str) -> Finalization:
    if job.attempt >= job.max_attempts:
        return Finalization(job.id, job.run_lease, JobState.FAILED, error=error, job=job)
    return Finalization(
        job.id, job.run_lease, JobState.RETRYABLE, delay_s * 1000, error=error, job=job
    )


def from_return(job: Job[Any], value: Any) -> Finalization:
    """What a handler's return value means for its job."""
    if value is None:
        return Finalization(job.id, job.run_lease, JobState.COMPLETED, job=job)
    if isinstance(value, RetryAfter):
        message = f"retry requested after {value.seconds:g}s"
        return _retry_or_fail(job, value.seconds, _error_entry(job, message, "RetryAfter"))
    if isinstance(value, Snooze):
        return Finalization(
            job.id, job.run_lease, JobState.SCHEDULED, value.seconds * 1000, refund=True, job=job
        )
    if isinstance(value, Cancel):
        error = _error_entry(job, value.reason, "Cancel")
        return Finalization(job.id, job.run_lease, JobState.CANCELLED, error=error, job=job)
    if isinstance(value, WaitForCallback):
        return _wait_for_callback(job, value)
    # Anything else is treated as success: handlers often return incidental values.
    return Finalization(job.id, job.run_lease, JobState.COMPLETED, job=job)


def from_exception(job: Job[Any], exc: BaseException) -> Finalization:
    """What a handler's exception means for its job."""
    message = str(exc) or type(exc).__name__
    kind = type(exc).__qualname__
    tb = "".join(traceback.format_exception(exc))
    error = _error_entry(job, message, kind, tb)
    if isinstance(exc, TerminalError):
        return Finalization(job.id, job.run_lease, JobState.FAILED, error=error, job=job)
    return _retry_or_fail(job, backoff_seconds(job.attempt), error)


def failure(job: Job[Any], message: str, kind: str, *, terminal: bool) -> Finalization:
    """A failure the worker detected itself (unknown kind, deadline, undecodable args)."""
    error = _error_entry(job, message, kind)
    if terminal:
        return Finalization(job.id, job.run_lease, JobState.FAILED, error=error, job=job)
    return _retry_or_fail(job, backoff_seconds(job.attempt), error)


def _wait_for_callback(job: Job[Any], value: WaitForCallback) -> Finalization:
    """Park the job in waiting_external, if ``value`` names this attempt's callback id."""
    registered = getattr(job._updates, "callback_id", None)  # set by job.register_callback
    if registered is None or str(value.callback_id) != registered:
        message = "WaitForCallback needs the id returned by job.register_callback() in this attempt"
        return failure(job, message, "CallbackNotRegistered", terminal=True)
    return replace(from_return(job, None), state=JobState.WAITING_EXTERNAL)
