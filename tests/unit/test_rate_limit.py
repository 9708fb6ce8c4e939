"""Token bucket with a fake clock: refill, take, refund, live reconfiguration."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import awa
from awa.types import bucket_size
from awa.worker.rate_limit import TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_starts_full_and_refills_continuously() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, 0, clock=clock)  # burst 0 → ceil(10)
    assert bucket.burst == 10
    assert bucket.take(50) == 10 and bucket.take(1) == 0
    clock.now += 0.25
    assert bucket.take(50) == 2  # 2.5 tokens accrued, whole ones taken
    clock.now += 10
    assert bucket.take(50) == 10  # capped at the burst


def test_refund_returns_unused_tokens_up_to_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(5, 3, clock=clock)
    assert bucket.take(3) == 3
    bucket.refund(2)
    assert bucket.take(10) == 2
    bucket.refund(100)
    assert bucket.tokens == pytest.approx(3)


def test_seconds_until_next_token() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4, 1, clock=clock)
    assert bucket.seconds_until(1) == 0
    bucket.take(1)
    assert bucket.seconds_until(1) == pytest.approx(0.25)


def test_reconfigure_clamps_but_never_refills() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100, 100, clock=clock)
    bucket.take(90)  # 10 left
    bucket.reconfigure(5, 0)  # burst 5: clamp 10 → 5
    assert (bucket.rate, bucket.burst) == (5, 5) and bucket.tokens == pytest.approx(5)
    bucket.take(5)
    bucket.reconfigure(50, 0)  # a bigger burst does not grant tokens by itself
    assert bucket.tokens == pytest.approx(0)
    clock.now += 0.1
    assert bucket.take(100) == 5  # refills at the new rate


def test_sustained_rate_matches_configuration() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, 0, clock=clock)
    bucket.take(10)
    taken = 0
    for _ in range(40):  # 5 s in 125 ms steps (exact in binary floating point)
        clock.now += 0.125
        taken += bucket.take(1000)
    assert taken == 50


def test_a_bucket_without_a_burst_holds_a_second_of_its_rate_rounded_up() -> None:
    assert [bucket_size(2.5, None), bucket_size(2.5, 0), bucket_size(2.5, 7)] == [3, 3, 7]
    limits = awa.QueueLimits("q", None, 0.2, None, None, datetime.now(UTC))
    assert limits.effective_burst == 1
    assert awa.QueueLimits("q", 3, None, None, None, datetime.now(UTC)).effective_burst is None
