"""Which fires a cron tick enqueues (awa.maintenance.cron.due_fires), without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from awa.cronexpr import CronExpression
from awa.maintenance.cron import FRESH_LIMIT, due_fires

START = datetime(2024, 1, 1, tzinfo=UTC)
EVERY_SECOND = CronExpression.parse("* * * * * *", "UTC")


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def test_fires_a_previous_tick_left_owed_are_enqueued_with_those_due_since() -> None:
    """The last fire enqueued was 100 s (the previous tick enqueued only part of what it
    found); the previous tick looked at 111 s: everything after 100 s is owed."""
    fires = due_fires(EVERY_SECOND, _at(100), _at(113), "coalesce", looked_at=_at(111))
    assert fires == [_at(s) for s in range(101, 114)]


def test_more_fires_than_the_limit_since_the_previous_tick_are_folded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = _at(FRESH_LIMIT + 5)
    assert due_fires(EVERY_SECOND, START, now, "coalesce", looked_at=START) == [now]
    assert "more than" in caplog.text
    # catch_up still enqueues them all, a batch per tick
    assert len(due_fires(EVERY_SECOND, START, now, "catch_up", looked_at=START)) == 100
