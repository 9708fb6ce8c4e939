"""How explanations write times, durations, counts and processes for people."""

from __future__ import annotations

from datetime import UTC, datetime

from awa.types import RuntimeInstance


def duration(seconds: float) -> str:
    """``50 ms``, ``2.4 s``, ``12 s``, ``4 min 10 s``, ``2 h 5 min``, ``3 d 4 h``."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def at(moment: datetime) -> str:
    """An absolute time in UTC, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(now: datetime, moment: datetime) -> str:
    """``2 min ago`` (``just now`` for a moment not before ``now``)."""
    seconds = (now - moment).total_seconds()
    return "just now" if seconds <= 0 else f"{duration(seconds)} ago"


def relative(now: datetime, moment: datetime) -> str:
    """``in 5 s`` for the future, ``3 s ago`` for the past."""
    seconds = (moment - now).total_seconds()
    return f"in {duration(seconds)}" if seconds > 0 else ago(now, moment)


def when(now: datetime, moment: datetime) -> str:
    """``2025-01-31 12:00:05 UTC (in 5 s)``."""
    return f"{at(moment)} ({relative(now, moment)})"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 job``, ``3 jobs``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def rate(per_second: float) -> str:
    """``2/s``, ``0.5/s``, ``1.2k/s``."""
    if per_second >= 1000:
        return f"{per_second / 1000:.3g}k/s"
    return f"{per_second:.3g}/s"


def process(instance: RuntimeInstance) -> str:
    """``host-a pid 1234``."""
    return f"{instance.hostname} pid {instance.pid}"


def names(items: list[str]) -> str:
    """``a, b and c``."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
