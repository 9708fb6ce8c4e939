"""QueueControl: effective values, whole-state overrides and the two guard rails."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from awa.config import QueueConfig
from awa.worker.control import QueueControl, minimums_refusal
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
        "max_workers": 50, "min_workers": 0, "weight": 1,
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


def test_a_deadline_override_past_int32_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    """Written by hand before migration 0035 bounded the column: every claim of the queue
    failed ("interval out of range") with it, so the worker keeps its own deadline."""
    control = QueueControl(QueueConfig("q", deadline_ms=300_000))
    with caplog.at_level(logging.WARNING, logger="awa"):
        control.apply(_row(deadline_ms=9_223_372_036_854_775_807))
    assert control.deadline_ms == 300_000
    assert "over 2147483647 ms" in control.ignored["deadline_ms"]
    assert any("over 2147483647 ms" in r.getMessage() for r in caplog.records)
    control.apply(_row(deadline_ms=2_147_483_647))  # the bound itself applies
    assert control.deadline_ms == 2_147_483_647 and control.ignored == {}


def test_concurrency_overrides_apply_in_their_own_mode_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hard = QueueControl(QueueConfig("h", max_workers=10))
    weighted = QueueControl(QueueConfig("w", min_workers=2, weight=1), weighted=True)
    with caplog.at_level(logging.WARNING, logger="awa"):
        hard.apply(_row(max_workers=3, min_workers=1, weight=5))
        weighted.apply(_row(max_workers=3, min_workers=4, weight=5))
    assert (hard.max_workers, hard.min_workers, hard.weight) == (3, 0, 1)
    assert set(hard.ignored) == {"min_workers", "weight"}
    assert (weighted.max_workers, weighted.min_workers, weighted.weight) == (50, 4, 5)
    assert set(weighted.ignored) == {"max_workers"}
    assert "weighted mode" in weighted.ignored["max_workers"]
    assert len([r for r in caplog.records if "no meaning" in r.getMessage()]) == 3
    hard.apply(_row())
    assert (hard.max_workers, hard.ignored) == (10, {})


def test_minimums_over_the_global_pool_are_refused() -> None:
    a = QueueControl(QueueConfig("a", min_workers=2), weighted=True)
    b = QueueControl(QueueConfig("b", min_workers=2), weighted=True)
    rows = {"a": {**_row(min_workers=5), "queue": "a"}, "b": {**_row(), "queue": "b"}}
    assert minimums_refusal([a, b], rows, 8) == {}  # 5 + 2 <= 8
    refused = minimums_refusal([a, b], rows, 6)  # 5 + 2 > 6
    assert list(refused) == ["a"] and "7" in refused["a"] and "6" in refused["a"]
    a.apply(rows["a"], minimums_refused=refused.get("a"))
    assert a.min_workers == 2 and a.ignored["min_workers"] == refused["a"]
    assert minimums_refusal([a, b], rows, None) == {}  # hard-reserved: no such rule


def test_a_refused_minimum_leaves_the_other_queues_accepted_ones_in_force() -> None:
    a = QueueControl(QueueConfig("a", min_workers=3), weighted=True)
    b = QueueControl(QueueConfig("b", min_workers=3), weighted=True)
    rows = {"a": {**_row(min_workers=5), "queue": "a"}, "b": {**_row(), "queue": "b"}}
    assert minimums_refusal([a, b], rows, 10) == {}  # 5 + 3
    a.apply(rows["a"])
    assert a.min_workers == 5
    # Then b is given 6: 5 + 6 > 10. b's new override is refused; a's keeps its 5.
    rows["b"] = {**_row(min_workers=6), "queue": "b"}
    refused = minimums_refusal([a, b], rows, 10)
    assert list(refused) == ["b"]
    a.apply(rows["a"], minimums_refused=refused.get("a"))
    b.apply(rows["b"], minimums_refused=refused.get("b"))
    assert (a.min_workers, b.min_workers) == (5, 3) and "min_workers" in b.ignored
    assert "min_workers" not in a.ignored


def test_a_refused_minimum_does_not_count_against_another_queues_new_one() -> None:
    """Global 8; a and b 1, c 0. b is given 8 (Σ 10: refused); then c is given 2: Σ with
    it is 1 + 1 + 2 = 4, so it applies, whatever b's refused 8 would have made."""
    a = QueueControl(QueueConfig("a", min_workers=1), weighted=True)
    b = QueueControl(QueueConfig("b", min_workers=1), weighted=True)
    c = QueueControl(QueueConfig("c", min_workers=0), weighted=True)
    rows = {q: {**_row(), "queue": q} for q in "abc"}
    rows["b"] = {**_row(min_workers=8), "queue": "b"}
    assert list(minimums_refusal([a, b, c], rows, 8)) == ["b"]
    rows["c"] = {**_row(min_workers=2), "queue": "c"}
    refused = minimums_refusal([a, b, c], rows, 8)
    assert list(refused) == ["b"] and "would be 9" in refused["b"]  # b beside a and c as they are


def test_workers_with_different_histories_refuse_the_same_minimum() -> None:
    """Global 10; a and b 3. b is given 6, then a 6: Σ 12. A worker that applied b's
    first and one started after both writes keep b's 6 (the older write) and refuse a's."""
    earlier, later = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    rows = {
        "a": {**_row(min_workers=6), "queue": "a", "overrides_updated_at": later},
        "b": {**_row(min_workers=6), "queue": "b", "overrides_updated_at": earlier},
    }

    def worker(in_force: dict[str, int]) -> dict[str, int]:
        controls = []
        for name in "ab":
            control = QueueControl(QueueConfig(name, min_workers=3), weighted=True)
            if name in in_force:  # what this worker applied before the other write
                control.apply(rows[name])
            controls.append(control)
        refused = minimums_refusal(controls, rows, 10)
        for control in controls:
            name = control.config.name
            control.apply(rows[name], minimums_refused=refused.get(name))
        return {c.config.name: c.min_workers for c in controls}

    assert worker({"b": 6}) == worker({}) == worker({"a": 6}) == {"a": 3, "b": 6}
