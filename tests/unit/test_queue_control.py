"""QueueControl: effective values, whole-state overrides and the two guard rails."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from awa.config import QueueConfig
from awa.worker.control import QueueControl
from awa.worker.rate_limit import TokenBucket


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "paused": False,
        "override_poll_interval_ms": None,
        "override_claim_batch_size": None,
        "override_rate_limit": None,
        "override_deadline_ms": None,
        "overrides_updated_at": None,
    }
    row.update({f"override_{k}": v for k, v in overrides.items()})
    return row


def test_overrides_win_and_null_reverts() -> None:
    control = QueueControl(QueueConfig("q", poll_interval_ms=200))
    control.apply(_row(poll_interval_ms=1000, claim_batch_size=7, deadline_ms=5000))
    assert control.effective_values() == {
        "poll_interval_ms": 1000, "claim_batch_size": 7, "rate_limit": None, "deadline_ms": 5000,
    }  # fmt: skip
    control.apply(_row(claim_batch_size=3))  # whole state: the others revert
    assert control.effective_values()["poll_interval_ms"] == 200
    assert control.effective_values()["deadline_ms"] == 300_000
    control.apply(None)
    assert control.effective_values() == control.configured_values()


def test_rate_override_retunes_the_bucket_and_clear_restores_it() -> None:
    bucket = TokenBucket(10, 20)
    control = QueueControl(QueueConfig("q", rate_limit=(10, 20)), bucket)
    control.apply(_row(rate_limit=2.5))
    assert (bucket.rate, bucket.burst, control.rate_limit) == (2.5, 3, 2.5)
    assert control.ignored == {}
    control.apply(_row())
    assert (bucket.rate, bucket.burst, control.rate_limit) == (10, 20, 10)


def test_rate_override_on_a_queue_without_limiter_creates_one_and_clear_removes_it() -> None:
    control = QueueControl(QueueConfig("q"))
    control.apply(_row(rate_limit=5.0))
    assert control.bucket is not None
    assert (control.bucket.rate, control.bucket.burst, control.rate_limit) == (5.0, 5, 5.0)
    assert control.ignored == {}
    control.apply(_row())
    assert control.bucket is None and control.rate_limit is None


def test_rate_override_equal_to_the_start_rate_still_takes_a_burst_of_ceil_rate() -> None:
    bucket = TokenBucket(10, 20)
    control = QueueControl(QueueConfig("q", rate_limit=(10, 20)), bucket)
    control.apply(_row(rate_limit=10.0))
    assert (bucket.rate, bucket.burst) == (10, 10)
    control.apply(_row())
    assert (bucket.rate, bucket.burst) == (10, 20)


def test_a_refusal_is_logged_once_per_change_and_again_after_a_clear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    control = QueueControl(QueueConfig("q", deadline_ms=0))
    with caplog.at_level(logging.WARNING, logger="awa"):
        control.apply(_row(deadline_ms=5000))
        control.apply(_row(deadline_ms=5000))  # the same refusal: not logged again
        control.apply(_row(deadline_ms=6000))  # a change: logged
        control.apply(_row())  # cleared
        control.apply(_row(deadline_ms=6000))  # set again after the clear: logged again
    warnings = [r for r in caplog.records if "zero boundary" in r.getMessage()]
    assert [r.getMessage().split("override ")[1].split(" ms")[0] for r in warnings] == [
        "5000",
        "6000",
        "6000",
    ]
    assert all(r.levelno == logging.WARNING and "q" in r.getMessage() for r in warnings)


@pytest.mark.parametrize(("configured", "override"), [(0, 5000), (300_000, 0)])
def test_deadline_override_never_crosses_zero(
    configured: int, override: int, caplog: pytest.LogCaptureFixture
) -> None:
    control = QueueControl(QueueConfig("q", deadline_ms=configured))
    with caplog.at_level(logging.WARNING, logger="awa"):
        control.apply(_row(deadline_ms=override))
    assert control.deadline_ms == configured
    assert "zero boundary" in control.ignored["deadline_ms"]
    assert any("zero boundary" in r.getMessage() for r in caplog.records)
