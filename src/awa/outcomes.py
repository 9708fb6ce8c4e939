"""Values a handler returns to steer what happens to its job.

Returning ``None`` completes the job; raising retries it (or fails it when attempts run
out, or at once for :class:`~awa.errors.TerminalError`). These values cover the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from awa.errors import ValidationError
from awa.validate import MAX_DURATION_S

# Beyond some 9e12 s, now() + delay overflows PostgreSQL's timestamp range, and the
# statement writing the outcome would fail for every job of its batch.
MAX_DELAY_SECONDS = MAX_DURATION_S


def _check_seconds(field: str, seconds: float) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValidationError(field, f"must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValidationError(field, f"must be a finite number >= 0, got {seconds!r}")
    if seconds > MAX_DELAY_SECONDS:
        raise ValidationError(field, f"must be <= {MAX_DELAY_SECONDS} (100 years), got {seconds!r}")


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """Retry after ``seconds``; the attempt counts against ``max_attempts``."""

    seconds: float

    def __post_init__(self) -> None:
        _check_seconds("RetryAfter.seconds", self.seconds)


@dataclass(frozen=True, slots=True)
class Snooze:
    """Run again after ``seconds`` without consuming an attempt."""

    seconds: float

    def __post_init__(self) -> None:
        _check_seconds("Snooze.seconds", self.seconds)


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop for good: the job ends ``cancelled`` with ``reason`` recorded."""

    reason: str = "cancelled by handler"


@dataclass(frozen=True, slots=True)
class WaitForCallback:
    """Park the job in ``waiting_external`` until an external system resolves it.

    ``callback_id`` is what ``await job.register_callback(...)`` returned in this attempt;
    ``complete_external``, ``fail_external`` or ``retry_external`` with that id moves the
    job on, and the leader retries (or fails) it when the callback times out.
    """

    callback_id: str


Outcome = RetryAfter | Snooze | Cancel | WaitForCallback | None
