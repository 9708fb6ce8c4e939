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


def test_every_fire_due_since_the_previous_tick_is_enqueued_past_a_statements_worth() -> None:
    """A tick blocked 150 s on a lock: the next finds 150 fires due, and enqueues them
    all (it enqueued 100 and lost the rest, a review)."""
    fires = due_fires(EVERY_SECOND, START, _at(150.2), "coalesce", looked_at=_at(0.1))
    assert fires == [_at(s) for s in range(1, 151)]


def test_more_fires_than_the_limit_since_the_previous_tick_are_folded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = _at(FRESH_LIMIT + 5)
    assert due_fires(EVERY_SECOND, START, now, "coalesce", looked_at=START) == [now]
    assert "more than" in caplog.text
    # catch_up still enqueues them all, a batch per tick
    assert len(due_fires(EVERY_SECOND, START, now, "catch_up", looked_at=START)) == 100
