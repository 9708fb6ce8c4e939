"""Cron expressions: parsing and "when is the next fire", time-zone and DST aware (I/O-free).

Five fields (``minute hour day-of-month month day-of-week``) or six with seconds first
(``second minute hour day-of-month month day-of-week``). Each field takes ``*``, numbers,
ranges ``a-b``, steps ``*/n`` ``a-b/n`` ``a/n``, lists ``a,b``; months and weekdays also
take names (``jan``, ``mon``); weekday 0 and 7 are Sunday. When both day-of-month and
day-of-week are restricted, a day matches either; a field starting with ``*`` (``*/2``
too) is not restricted (Vixie cron). Macros: ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.

Expressions are evaluated on the wall clock of an IANA time zone. Daylight saving:

* a wall time skipped by a spring-forward fires once, shifted forward by the gap
  (``30 2 * * *`` fires at 03:30 on that day), so a daily job never loses its day;
* a wall time that occurs twice at a fall-back fires once, at its first occurrence —
  unless the hour field is ``*``: then the expression is about elapsed hours and it
  fires in both occurrences (``*/15 * * * *`` keeps firing every 15 minutes).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from awa.errors import ValidationError

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, start=1)}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (name, low, high, names)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
# How far ahead to look for a match before declaring the expression can never fire
# (covers 29 February on a given weekday, which recurs within 28 years).
_HORIZON_DAYS = 366 * 29
# Nonexistent wall times map forward by the DST gap (at most a few hours): candidates
# this far before the reference instant's wall time are checked too.
_GAP_MARGIN = timedelta(hours=3)


def _number(token: str, low: int, high: int, names: dict[str, int], where: str) -> int:
    value = names.get(token.lower())
    if value is None:
        if not (token.isascii() and token.isdigit()):  # not '²' or '٣'
            raise ValueError(f"{where}: {token!r} is not a number")
        value = int(token)
    if not low <= value <= high:
        raise ValueError(f"{where}: {value} is outside {low}-{high}")
    return value


def _parse_field(text: str, low: int, high: int, names: dict[str, int], where: str) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ValueError(f"{where}: empty list item in {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
                raise ValueError(f"{where}: step {step_text!r} must be a positive integer")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start = _number(a, low, high, names, where)
            end = _number(b, low, high, names, where)
            if start > end:
                raise ValueError(f"{where}: range {base!r} runs backwards")
        else:
            start = _number(base, low, high, names, where)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    return values


@dataclass(frozen=True, slots=True)
class CronExpression:
    """A parsed cron expression; :meth:`next_after` gives fire instants in UTC."""

    expression: str
    timezone: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday … 6 = Saturday
    day_restricted: bool
    weekday_restricted: bool

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> CronExpression:
        """Parse ``expression`` for ``timezone``; ValidationError naming the bad field."""
        if not isinstance(expression, str):
            raise ValidationError("cron_expr", f"must be a string, got {type(expression).__name__}")
        _zone(timezone)
        text = _MACROS.get(expression.strip().lower(), expression)
        parts = text.split()
        if len(parts) == 5:
            parts = ["0", *parts]
        elif len(parts) != 6:
            raise ValidationError(
                "cron_expr",
                f"{expression!r} has {len(parts)} fields; expected 5 "
                "(minute hour day month weekday) or 6 (with seconds first)",
            )
        try:
            sets = [
                _parse_field(part, low, high, names, name)
                for part, (name, low, high, names) in zip(parts, _FIELDS, strict=True)
            ]
        except ValueError as exc:
            raise ValidationError("cron_expr", f"{expression!r}: {exc}") from None
        weekdays = frozenset(d % 7 for d in sets[5])
        parsed = cls(
            expression=expression,
            timezone=timezone,
            seconds=tuple(sorted(sets[0])),
            minutes=tuple(sorted(sets[1])),
            hours=tuple(sorted(sets[2])),
            days=frozenset(sets[3]),
            months=frozenset(sets[4]),
            weekdays=weekdays,
            # Vixie cron: a field starting with '*' (also '*/2') leaves the day to the
            # other field; both restricted, either may match.
            day_restricted=not parts[3].startswith("*"),
            weekday_restricted=not parts[5].startswith("*"),
        )
        if parsed.next_wall(datetime(2000, 1, 1)) is None:
            raise ValidationError("cron_expr", f"{expression!r} never matches a calendar date")
        return parsed

    @property
    def zone(self) -> ZoneInfo:
        """The IANA time zone the expression is evaluated in."""
        return _zone(self.timezone)

    # -- wall-clock matching ---------------------------------------------------------

    def _day_matches(self, t: datetime) -> bool:
        in_days = t.day in self.days
        in_weekdays = (t.isoweekday() % 7) in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def next_wall(self, start: datetime) -> datetime | None:
        """The first naive wall time at or after ``start`` (whole seconds) that matches."""
        t = start.replace(microsecond=0) + (timedelta(seconds=1) if start.microsecond else _ZERO)
        limit = t + timedelta(days=_HORIZON_DAYS)
        while t <= limit:
            if t.month not in self.months:
                t = _first_of_next_month(t)
                continue
            if not self._day_matches(t):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
                continue
            found = self._time_on_day(t)
            if found is not None:
                return found
            t = datetime(t.year, t.month, t.day) + timedelta(days=1)
        return None

    def _time_on_day(self, t: datetime) -> datetime | None:
        """The first matching time of t's day at or after t's time of day."""
        for hour in self.hours[bisect.bisect_left(self.hours, t.hour) :]:
            first_minute = t.minute if hour == t.hour else 0
            for minute in self.minutes[bisect.bisect_left(self.minutes, first_minute) :]:
                first_second = t.second if (hour, minute) == (t.hour, t.minute) else 0
                i = bisect.bisect_left(self.seconds, first_second)
                if i < len(self.seconds):
                    return t.replace(hour=hour, minute=minute, second=self.seconds[i])
        return None

    # -- instants --------------------------------------------------------------------

    def _instants(self, wall: datetime, zone: ZoneInfo) -> list[datetime]:
        """The UTC instants at which wall time ``wall`` fires (0, 1 or 2 of them)."""
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if first == second:
            return [first]
        exists = first.astimezone(zone).replace(tzinfo=None) == wall
        if not exists:  # skipped by a spring-forward: fold=0 is the wall time + the gap
            return [max(first, second)]
        if len(self.hours) == 24:  # every hour: fire in both occurrences
            return sorted((first, second))
        return [min(first, second)]

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire instant (UTC) strictly after the aware datetime ``after``."""
        zone = self.zone
        after = after.astimezone(UTC)
        wall = after.astimezone(zone).replace(tzinfo=None)
        if (after - _GAP_MARGIN).astimezone(zone).utcoffset() != (after + _GAP_MARGIN).astimezone(
            zone
        ).utcoffset():
            # Near a DST change, wall times just before ours may map after it.
            wall -= _GAP_MARGIN
        best: datetime | None = None
        while True:
            candidate = self.next_wall(wall)
            if candidate is None:
                return best
            # A wall time maps to an instant whose local wall time is at or after it, and
            # offsets differ by less than the margin: past this point nothing maps earlier.
            if (
                best is not None
                and candidate > best.astimezone(zone).replace(tzinfo=None) + _GAP_MARGIN
            ):
                return best
            for instant in self._instants(candidate, zone):
                if instant > after and (best is None or instant < best):
                    best = instant
            # Wall times after best's map after it unless a DST change lies within the
            # margin of best (offsets differ by less than it); the wall times before it
            # were all visited. So the span from `after` to best need not be steady: a
            # per-second schedule's fire a weekend away took 10 800 candidates, 80 ms.
            if best is not None and _steady(zone, best - _GAP_MARGIN, best + _GAP_MARGIN):
                return best
            wall = candidate + timedelta(seconds=1)

    def latest_in(self, after: datetime, until: datetime) -> datetime | None:
        """The last fire instant in (after, until], or None; in about 2·log2(gap in
        seconds) calls of :meth:`next_after` however many fires the gap holds (a
        per-second schedule after a month's outage: ~45, not 2.6 million).

        ``next_after(t) <= until`` holds exactly for t before that last fire, so the
        search brackets it: back from ``until`` by doubling steps, then by halving."""
        first = self.next_after(after)
        if first is None or first > until:
            return None
        late, step = until, timedelta(seconds=1)  # late: no fire in (late, until]
        early = max(after, until - step)
        while early > after and (fire := self.next_after(early)) is not None and fire > until:
            late, step = early, step * 2
            early = max(after, until - step)
        # next_after(early) <= until < next_after(late); fires are whole seconds apart.
        while late - early > _ONE_SECOND:
            middle = early + (late - early) / 2
            fire = self.next_after(middle)
            if fire is not None and fire <= until:
                early = middle
            else:
                late = middle
        return self.next_after(early)


_ZERO = timedelta(0)
_ONE_SECOND = timedelta(seconds=1)


def _steady(zone: ZoneInfo, start: datetime, end: datetime) -> bool:
    """True when the UTC offset cannot change between two instants less than a day apart
    (DST changes are months apart, so equal offsets at both ends mean none between)."""
    return (
        end - start < timedelta(days=1)
        and start.astimezone(zone).utcoffset() == end.astimezone(zone).utcoffset()
    )


def _first_of_next_month(t: datetime) -> datetime:
    if t.month == 12:
        return datetime(t.year + 1, 1, 1)
    return datetime(t.year, t.month + 1, 1)


# Files of the zone database that name no zone but the host's own setting: fire times
# would follow whichever host leads, and a failover could fire a day's job twice.
_HOST_ZONES = frozenset({"localtime", "posixrules"})


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ValidationError("timezone", f"must be an IANA time zone name, got {name!r}")
    if name in _HOST_ZONES:
        raise ValidationError(
            "timezone", f"{name!r} is the host's setting, not a zone: name one (Europe/Paris)"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError("timezone", f"unknown IANA time zone {name!r}") from None


__all__ = ["CronExpression"]
