"""Per-queue token bucket, applied after permits and before the claim.

Tokens refill continuously at ``rate`` per second up to ``burst``. A poll takes as many
whole tokens as it has permits (or fewer), claims at most that many jobs, and refunds
what the claim did not use. ``reconfigure`` retunes a live bucket without refilling it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from awa.types import bucket_size

Clock = Callable[[], float]


class TokenBucket:
    """A continuous-refill token bucket with an injectable monotonic clock."""

    def __init__(self, rate: float, burst: int, *, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.rate = rate
        self.burst = bucket_size(rate, burst)
        self._tokens = float(self.burst)
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._stamp
        self._stamp = now
        if elapsed > 0:
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)

    @property
    def tokens(self) -> float:
        """Tokens available now (fractional)."""
        self._refill()
        return self._tokens

    def take(self, wanted: int) -> int:
        """Take up to ``wanted`` whole tokens; returns how many were taken."""
        self._refill()
        granted = max(0, min(wanted, math.floor(self._tokens)))
        self._tokens -= granted
        return granted

    def refund(self, count: int) -> None:
        """Give back tokens a claim did not use (never above the burst)."""
        if count > 0:
            self._tokens = min(float(self.burst), self._tokens + count)

    def seconds_until(self, count: int = 1) -> float:
        """How long until ``count`` whole tokens are available (0 when they are)."""
        self._refill()
        missing = count - self._tokens
        return 0.0 if missing <= 0 else missing / self.rate

    def reconfigure(self, rate: float, burst: int) -> None:
        """New rate and burst; current tokens are clamped to the burst, never refilled."""
        self._refill()
        self.rate = rate
        self.burst = bucket_size(rate, burst)
        self._tokens = min(self._tokens, float(self.burst))
