"""The cron expression parser and its fire times, including daylight saving changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from awa.cronexpr import CronExpression
from awa.errors import ValidationError

NY = "America/New_York"


def _next(expr: str, after: datetime, n: int = 1, tz: str = "UTC") -> list[datetime]:
    cron = CronExpression.parse(expr, tz)
    out: list[datetime] = []
    for _ in range(n):
        nxt = cron.next_after(after)
        assert nxt is not None
        out.append(nxt)
        after = nxt
    return out


def _local(instants: list[datetime], tz: str) -> list[str]:
    return [i.astimezone(ZoneInfo(tz)).strftime("%m-%d %H:%M:%S%z") for i in instants]


T0 = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("* * * * *", ["00:01:00", "00:02:00"]),
        ("*/15 * * * *", ["00:15:00", "00:30:00"]),
        ("5,10 * * * *", ["00:05:00", "00:10:00"]),
        ("0 9-10 * * *", ["09:00:00", "10:00:00"]),
        ("0 0-12/6 * * *", ["06:00:00", "12:00:00"]),
        ("30/10 * * * *", ["00:30:00", "00:40:00"]),
        ("*/20 * * * * *", ["00:00:20", "00:00:40"]),  # six fields: seconds first
        ("@hourly", ["01:00:00", "02:00:00"]),
    ],
)
def test_fields_steps_ranges_lists(expr: str, expected: list[str]) -> None:
    fires = _next(expr, T0, len(expected))
    assert [f.strftime("%H:%M:%S") for f in fires] == expected


def test_names_and_day_semantics() -> None:
    assert _next("0 0 * jan-feb mon", T0, 2) == [
        datetime(2024, 1, 8, tzinfo=UTC),
        datetime(2024, 1, 15, tzinfo=UTC),
    ]
    # Both day fields restricted: either matches (the 13th, or any Friday).
    fires = _next("0 0 13 * fri", T0, 3)
    assert [f.day for f in fires] == [5, 12, 13]
    assert _next("0 0 * * 7", T0)[0].isoweekday() == 7  # 7 is Sunday too
    assert _next("@yearly", T0)[0] == datetime(2025, 1, 1, tzinfo=UTC)
    assert _next("0 0 29 2 *", T0 + timedelta(days=90))[0] == datetime(2028, 2, 29, tzinfo=UTC)


def test_a_field_starting_with_a_star_leaves_the_day_to_the_other() -> None:
    """Vixie cron: '*/2' is unrestricted like '*', so the other field alone decides."""
    mondays = _next("0 0 */2 * 1", T0, 3)  # every Monday, not also every other day
    assert [f.isoweekday() for f in mondays] == [1, 1, 1]
    firsts = _next("0 0 1 * */2", T0, 3)  # the 1st on Sun/Tue/Thu/Sat only
    assert all(f.day == 1 and f.isoweekday() % 7 in (0, 2, 4, 6) for f in firsts)
    assert [f.day for f in _next("0 0 13 * fri", T0, 3)] == [5, 12, 13]  # both: either


def _last_by_walking(cron: CronExpression, after: datetime, until: datetime) -> datetime | None:
    """The reference: every fire in (after, until] in turn, the last one kept."""
    last = None
    while (fire := cron.next_after(after)) is not None and fire <= until:
        last = after = fire
    return last


@pytest.mark.parametrize(
    ("expr", "tz"),
    [("*/10 * * * *", "UTC"), ("30 2 * * *", NY), ("0 * * * *", NY),
     ("0 0 13 * fri", "UTC"), ("15 1-3 * * *", "Australia/Lord_Howe")],
)  # fmt: skip
def test_latest_in_is_the_last_of_the_fires_between(expr: str, tz: str) -> None:
    cron = CronExpression.parse(expr, tz)
    start = datetime(2024, 3, 1, tzinfo=UTC)
    for hours in (0, 1, 7, 30, 24 * 40, 24 * 250):
        until = start + timedelta(hours=hours, minutes=17)
        expected = _last_by_walking(cron, start, until)
        assert cron.latest_in(start, until) == expected, (hours, expected)
    fire = cron.next_after(start)
    assert fire is not None and cron.latest_in(start, fire) == fire  # (after, until]
    assert cron.latest_in(fire, fire) is None


def _counting(monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    """A one-item list counting the calls of CronExpression.<method> from now on."""
    calls = [0]
    plain = getattr(CronExpression, method)

    def counted(self: CronExpression, at: datetime) -> datetime | None:
        calls[0] += 1
        result: datetime | None = plain(self, at)
        return result

    monkeypatch.setattr(CronExpression, method, counted)
    return calls


def test_latest_in_does_not_walk_every_fire_of_a_long_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-second schedule of office hours after 45 days down: one fire found by a
    bracketing search (a walk over every fire held the leader's loop for 15-25 s)."""
    cron = CronExpression.parse("* * 9-17 * * 1-5")
    calls = _counting(monkeypatch, "next_after")
    sunday = datetime(2026, 12, 6, 20, tzinfo=UTC)
    latest = cron.latest_in(sunday - timedelta(days=45), sunday)
    assert latest == datetime(2026, 12, 4, 17, 59, 59, tzinfo=UTC)  # Friday, last second
    assert calls[0] < 100


def test_a_fire_days_away_is_found_without_walking_its_following_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From Saturday, Monday 09:00 was confirmed by visiting every wall second up to 12:00
    (10 800 candidates, 80 ms a call): only a DST change near the fire needs that."""
    cron = CronExpression.parse("* * 9-17 * * 1-5", NY)
    walls = _counting(monkeypatch, "next_wall")
    saturday = datetime(2026, 12, 5, 12, tzinfo=UTC)
    assert cron.next_after(saturday) == datetime(2026, 12, 7, 14, tzinfo=UTC)  # 09:00 EST
    assert walls[0] < 5


def test_next_is_strictly_after() -> None:
    at = datetime(2024, 1, 1, 0, 5, tzinfo=UTC)
    assert _next("5 * * * *", at)[0] == datetime(2024, 1, 1, 1, 5, tzinfo=UTC)
    assert _next("* * * * * *", at + timedelta(microseconds=500))[0] == at + timedelta(seconds=1)


def test_spring_forward_skipped_time_fires_once_after_the_gap() -> None:
    day = datetime(2024, 3, 9, 12, tzinfo=UTC)
    assert _local(_next("30 2 * * *", day, 2, NY), NY) == [
        "03-10 03:30:00-0400",  # 02:30 did not exist
        "03-11 02:30:00-0400",
    ]
    # Every hour: the missing hour is simply absent, nothing doubles.
    hourly = _local(_next("0 * * * *", datetime(2024, 3, 10, 5, tzinfo=UTC), 3, NY), NY)
    assert hourly == ["03-10 01:00:00-0500", "03-10 03:00:00-0400", "03-10 04:00:00-0400"]
    # Starting inside the shifted window still finds the shifted fire.
    inside = datetime(2024, 3, 10, 7, 10, tzinfo=UTC)  # 03:10 EDT
    assert _local(_next("30 2 * * *", inside, 1, NY), NY) == ["03-10 03:30:00-0400"]


def test_fall_back_repeated_time_fires_once_unless_hourly() -> None:
    day = datetime(2024, 11, 2, 12, tzinfo=UTC)
    assert _local(_next("30 1 * * *", day, 2, NY), NY) == [
        "11-03 01:30:00-0400",  # the first 01:30 only
        "11-04 01:30:00-0500",
    ]
    quarter = _local(_next("*/30 * * * *", datetime(2024, 11, 3, 4, 45, tzinfo=UTC), 4, NY), NY)
    assert quarter == [
        "11-03 01:00:00-0400",
        "11-03 01:30:00-0400",
        "11-03 01:00:00-0500",
        "11-03 01:30:00-0500",
    ]


@pytest.mark.parametrize(
    ("expr", "tz", "field", "message"),
    [
        ("* * * *", "UTC", "cron_expr", "4 fields"),
        ("* * * * * * *", "UTC", "cron_expr", "7 fields"),
        ("60 * * * *", "UTC", "cron_expr", "minute: 60 is outside 0-59"),
        ("* 24 * * *", "UTC", "cron_expr", "hour"),
        ("* * 0 * *", "UTC", "cron_expr", "day of month"),
        ("* * * 13 *", "UTC", "cron_expr", "month"),
        ("* * * * 8", "UTC", "cron_expr", "day of week"),
        ("*/0 * * * *", "UTC", "cron_expr", "step"),
        ("5-1 * * * *", "UTC", "cron_expr", "backwards"),
        ("x * * * *", "UTC", "cron_expr", "not a number"),
        ("1,,2 * * * *", "UTC", "cron_expr", "empty"),
        ("0 0 31 2 *", "UTC", "cron_expr", "never"),
        ("*/ * * * *", "UTC", "cron_expr", "step"),  # an empty step is no step of 1
        ("5/ * * * *", "UTC", "cron_expr", "step"),
        ("\u00b2 * * * *", "UTC", "cron_expr", "minute: '\u00b2' is not a number"),
        ("\u0663 * * * *", "UTC", "cron_expr", "not a number"),  # an Arabic-Indic three
        ("*/\u0663 * * * *", "UTC", "cron_expr", "step"),
        ("* * * * *", "Nowhere/City", "timezone", "unknown"),
        ("* * * * *", "", "timezone", "IANA"),
        # The host's own zone: fire times would follow whichever host leads (a review).
        ("* * * * *", "localtime", "timezone", "host's setting"),
        ("* * * * *", "posixrules", "timezone", "host's setting"),
    ],
)
def test_invalid_expressions_name_the_field(expr: str, tz: str, field: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        CronExpression.parse(expr, tz)
    assert info.value.field == field


def test_southern_hemisphere_changes() -> None:
    syd = "Australia/Sydney"
    spring = datetime(2024, 10, 5, 12, tzinfo=UTC)  # 22:00 AEST on the 5th
    assert _local(_next("30 2 * * *", spring, 2, syd), syd) == [
        "10-06 03:30:00+1100",  # 02:30 skipped by the spring-forward
        "10-07 02:30:00+1100",
    ]
    autumn = datetime(2024, 4, 6, 12, tzinfo=UTC)  # 23:00 AEDT on the 6th
    assert _local(_next("30 2 * * *", autumn, 2, syd), syd) == [
        "04-07 02:30:00+1100",  # the first of the two 02:30s
        "04-08 02:30:00+1000",
    ]
