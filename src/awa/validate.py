"""Small checks shared by every public entry point; each error names the field and bound."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from awa.errors import ValidationError

ErrorFactory = Callable[[str, str], Exception]

INT32_MAX = 2_147_483_647  # PostgreSQL integer: settings and overrides stored or sent as one
BIGINT_MAX = 9_223_372_036_854_775_807  # PostgreSQL bigint: job and operation ids
# 100 years: every duration PostgreSQL gets (as ms, or added to now()). Far beyond, an
# interval or now() + delay overflows PostgreSQL's ranges.
MAX_DURATION_MS = 100 * 31_557_600_000
MAX_DURATION_S = MAX_DURATION_MS // 1000


def integer(
    field: str,
    value: Any,
    *,
    low: int | None = None,
    high: int | None = None,
    error: ErrorFactory = ValidationError,
) -> int:
    """``value`` as an int within [low, high] (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(field, f"must be an integer, got {value!r}")
    if low is not None and value < low:
        raise error(field, f"must be >= {low}, got {value}")
    if high is not None and value > high:
        raise error(field, f"must be <= {high}, got {value}")
    return value


def flag(field: str, value: Any) -> bool:
    """``value`` as a real bool: a safety switch such as ``allow_all`` must not be turned
    on (or off) by a truthy or falsy stand-in like ``None``, ``0`` or ``"no"``."""
    if not isinstance(value, bool):
        raise ValidationError(field, f"must be True or False, got {value!r}")
    return value


def filtered_or_allowed(unfiltered: bool, allow_all: Any, refusal: str) -> None:
    """A bulk action names what it acts on, or says ``allow_all=True`` (a real bool):
    ValidationError on ``filter`` (``refusal`` says what it would have hit) otherwise."""
    if not flag("allow_all", allow_all) and unfiltered:
        raise ValidationError("filter", refusal)


def seconds(field: str, value: Any) -> float:
    """A duration in seconds: a number > 0 of at most 100 years (PostgreSQL takes it as
    milliseconds)."""
    duration = number(field, value, above=0)
    if duration * 1000 > MAX_DURATION_MS:
        raise ValidationError(field, f"must be at most {MAX_DURATION_MS // 1000}, got {value!r}")
    return duration


def row_id(field: str, value: Any) -> int:
    """A job's (or an operation's) id: a PostgreSQL bigint >= 1."""
    return integer(field, value, low=1, high=BIGINT_MAX)


def row_ids(field: str, value: Any, *, max_count: int | None = None) -> list[int]:
    """A non-empty list of ids (at most ``max_count``), each checked as ``field[]``."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError(field, f"must be a list of job ids, got {type(value).__name__}")
    if not value or (max_count is not None and len(value) > max_count):
        bound = f"1 to {max_count}" if max_count is not None else "at least 1"
        raise ValidationError(field, f"must hold {bound} job ids, got {len(value)}")
    return [row_id(f"{field}[]", i) for i in value]


def number(
    field: str,
    value: Any,
    *,
    above: float | None = None,
    error: ErrorFactory = ValidationError,
) -> float:
    """``value`` as a finite float strictly above ``above``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(field, f"must be a number, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past any float
        raise error(field, f"must be finite, got an integer of {len(str(value))} digits") from None
    if not finite:
        raise error(field, f"must be finite, got {value!r}")
    if above is not None and value <= above:
        raise error(field, f"must be > {above:g}, got {value!r}")
    return float(value)


def text(field: str, value: Any, *, max_length: int = 200) -> str:
    """A non-empty string of at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > max_length:
        raise ValidationError(field, f"must be at most {max_length} characters, got {len(value)}")
    if "\x00" in value:
        raise ValidationError(field, "must not contain NUL characters")
    if not value.isascii():
        _check_encodable(field, value)
    return value


def name(field: str, value: Any, *, max_length: int = 200) -> str:
    """A name given to something new (a job's queue and kind, a task, a schedule, a
    queue's settings): :func:`text` that is not only whitespace. Spaces at its ends are
    kept, as given: they are part of the name. Lookups and clean-ups take :func:`text`,
    so what an earlier version let in can still be found and removed."""
    checked = text(field, value, max_length=max_length)
    if not checked.strip():
        raise ValidationError(field, f"must not be blank, got {checked!r}")
    return checked


MAX_ORDERING_KEY_LENGTH = 255


def ordering_key(value: Any) -> str:
    """An ordering key (ADR 0034): a non-empty string of at most 255 characters."""
    return text("ordering_key", value, max_length=MAX_ORDERING_KEY_LENGTH)


def _check_encodable(field: str, value: str) -> None:
    """PostgreSQL stores UTF-8: an unpaired surrogate (from a lone ``\\ud800`` escape, or
    an undecodable command-line byte under ``surrogateescape``) has no encoding."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(
            field, f"must be valid Unicode text: an unpaired surrogate at position {exc.start}"
        ) from None


MIN_RATE = 1e-6
MAX_RATE = 1e6


def rate(field: str, value: Any, *, error: ErrorFactory = ValidationError) -> float:
    """A rate limit in jobs per second, within [MIN_RATE, MAX_RATE]: below, one token takes
    over 11 days to refill; above, the bucket's burst (``ceil(rate)``) is no longer a
    number of jobs anyone means."""
    number(field, value, above=0, error=error)
    if not MIN_RATE <= value <= MAX_RATE:
        raise error(field, f"must be between {MIN_RATE:g} and {MAX_RATE:g} jobs/s, got {value!r}")
    return float(value)


def aware_datetime(field: str, value: Any) -> datetime:
    """A timezone-aware datetime; naive ones are ambiguous and rejected."""
    if not isinstance(value, datetime):
        raise ValidationError(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValidationError(field, "must be timezone-aware (naive datetimes are ambiguous)")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    # A day's margin each side: read back in a session time zone, the instant must still
    # be a Python datetime (years 1 to 9999), or every read of the row would fail.
    if utc is None or not _EARLIEST <= utc <= _LATEST:
        raise ValidationError(
            field, f"must be between {_EARLIEST.date()} and {_LATEST.date()} UTC, got {value}"
        )
    # Sent in UTC: PostgreSQL reads no fractional offset, nor one past ±15:59:59, which a
    # Python timezone may have (up to a day).
    return utc


_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)
