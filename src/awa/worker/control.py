"""Per-queue control state: pause and runtime overrides (design record 038).

The start-time :class:`~awa.config.QueueConfig` is the default; a non-NULL override in
``awa.queue_meta`` wins; NULL reverts. Each dispatcher refreshes its queue's row once per
``override_refresh_ms`` (and at once when ``awa_control`` announces a change) and reads
the effective values here on every poll. Two guard rails refuse overrides that would
change the shape of the hot path; each refusal is logged once per change and reported.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from awa.config import QueueConfig
from awa.db.rows import runtime_overrides
from awa.types import Capacity, QueueRuntime, RuntimeOverrides
from awa.worker.rate_limit import TokenBucket

logger = logging.getLogger("awa")

KEYS = ("poll_interval_ms", "claim_batch_size", "rate_limit", "deadline_ms")
_NO_OVERRIDES = RuntimeOverrides(None, None, None, None, None)


class QueueControl:
    """Configured, stored and effective settings of one queue in this worker."""

    def __init__(self, config: QueueConfig, bucket: TokenBucket | None, refresh_ms: int) -> None:
        self.config = config
        self.bucket = bucket
        self.refresh_ms = refresh_ms
        self.paused = False
        self.overrides: RuntimeOverrides | None = None
        self.ignored: dict[str, str] = {}
        self.poll_interval_ms = config.poll_interval_ms
        self.claim_batch_size = config.claim_batch_size
        self.deadline_ms = config.deadline_ms
        self.rate_limit: float | None = config.rate
        self._next_refresh = 0.0
        self._warned: set[tuple[str, Any]] = set()

    # -- refresh cadence -------------------------------------------------------------

    def refresh_due(self, now: float | None = None) -> bool:
        """True when the cadence says the row should be read again."""
        return (time.monotonic() if now is None else now) >= self._next_refresh

    def seconds_to_refresh(self, now: float | None = None) -> float:
        """Time left until the next scheduled refresh (the poll sleep never exceeds it)."""
        return max(0.0, self._next_refresh - (time.monotonic() if now is None else now))

    def request_refresh(self) -> None:
        """Read the row on the next loop turn (an ``awa_control`` notice arrived)."""
        self._next_refresh = 0.0

    # -- applying a queue_meta row ---------------------------------------------------

    def apply(self, row: dict[str, Any] | None) -> None:
        """Adopt a freshly read ``queue_meta`` row (None: no row, nothing overridden)."""
        self._next_refresh = time.monotonic() + self.refresh_ms / 1000
        self.paused = bool(row and row["paused"])
        self.overrides = runtime_overrides(row)
        ignored: dict[str, str] = {}
        o = self.overrides or _NO_OVERRIDES
        self.poll_interval_ms = o.poll_interval_ms or self.config.poll_interval_ms
        self.claim_batch_size = o.claim_batch_size or self.config.claim_batch_size
        self.deadline_ms = self._effective_deadline(o.deadline_ms, ignored)
        self._apply_rate(o.rate_limit, ignored)
        self.ignored = ignored

    def _effective_deadline(self, override: int | None, ignored: dict[str, str]) -> int:
        configured = self.config.deadline_ms
        if override is None:
            return configured
        if (override == 0) != (configured == 0):
            reason = (
                f"deadline override {override} ms would cross the zero boundary "
                f"(started with deadline_ms={configured}); restart to change it"
            )
            self._refuse("deadline_ms", override, reason, ignored)
            return configured
        return override

    def _apply_rate(self, override: float | None, ignored: dict[str, str]) -> None:
        if self.bucket is None:
            if override is not None:
                reason = (
                    f"rate override {override:g}/s ignored: the queue was started without a "
                    "rate limiter; configure rate_limit at start to enable retuning"
                )
                self._refuse("rate_limit", override, reason, ignored)
            self.rate_limit = None
            return
        if override is None:
            rate, burst = self.config.rate, self.config.burst
        else:
            rate, burst = override, 0  # burst 0 → ceil(rate)
        assert rate is not None and burst is not None
        if rate != self.bucket.rate or (override is None and burst != self.bucket.burst):
            self.bucket.reconfigure(rate, burst)
        self.rate_limit = rate

    def _refuse(self, key: str, value: Any, reason: str, ignored: dict[str, str]) -> None:
        ignored[key] = reason
        if (key, value) not in self._warned:
            self._warned = {w for w in self._warned if w[0] != key} | {(key, value)}
            logger.warning(
                "queue %s: %s", self.config.name, reason,
                extra={"event": "override_ignored", "queue": self.config.name,
                       "override": key, "reason": reason},
            )  # fmt: skip

    # -- reporting -------------------------------------------------------------------

    def configured_values(self) -> dict[str, Any]:
        """The start-time values of the overridable settings."""
        c = self.config
        return {
            "poll_interval_ms": c.poll_interval_ms,
            "claim_batch_size": c.claim_batch_size,
            "rate_limit": c.rate,
            "deadline_ms": c.deadline_ms,
        }

    def stored_overrides(self) -> dict[str, Any]:
        """The override columns as last read (None where not set)."""
        o = self.overrides
        if o is None:
            return dict.fromkeys(KEYS)
        return {
            "poll_interval_ms": o.poll_interval_ms,
            "claim_batch_size": o.claim_batch_size,
            "rate_limit": o.rate_limit,
            "deadline_ms": o.deadline_ms,
        }

    def effective_values(self) -> dict[str, Any]:
        """What the dispatcher uses now."""
        return {
            "poll_interval_ms": self.poll_interval_ms,
            "claim_batch_size": self.claim_batch_size,
            "rate_limit": self.rate_limit,
            "deadline_ms": self.deadline_ms,
        }

    def runtime(self, capacity: Capacity, in_flight: int) -> QueueRuntime:
        """This queue's entry in the runtime snapshot."""
        return QueueRuntime(
            configured=self.configured_values(),
            overrides=self.stored_overrides(),
            effective=self.effective_values(),
            ignored=dict(self.ignored),
            capacity=capacity,
            in_flight=in_flight,
            paused=self.paused,
        )
