"""Per-queue control state: pause, runtime overrides (design record 038) and the fleet's
limits on the queue (CONTRACT §8–§9).

The start-time :class:`~awa.config.QueueConfig` is the default; a non-NULL override in
``awa.queue_meta`` wins; NULL reverts. The worker's control refresher reads every queue's
row in one statement per cadence (and at once on an ``awa_control`` notice) and hands it
to :meth:`QueueControl.apply`; dispatchers read the effective values here on every poll.
Pure code: no I/O, so every rule is unit-tested without a database.

Guard rails: a deadline override that would cross the zero boundary relative to
``start()`` is refused, logged once per change and reported. **Beyond** the record (its
first guard rail is lifted, CONTRACT §10): a rate override on a queue started without a
limiter creates one, and clearing it removes it again.
"""

from __future__ import annotations

import logging
from typing import Any

from awa.config import QueueConfig
from awa.db.rows import control_limits, control_pool_member, runtime_overrides
from awa.types import Capacity, PoolMember, QueueLimits, QueueRuntime, RuntimeOverrides
from awa.worker.rate_limit import TokenBucket

logger = logging.getLogger("awa")

KEYS = ("poll_interval_ms", "claim_batch_size", "rate_limit", "deadline_ms")
_NO_OVERRIDES = RuntimeOverrides(None, None, None, None, None)


class QueueControl:
    """Configured, stored and effective settings of one queue in this worker."""

    def __init__(self, config: QueueConfig, bucket: TokenBucket | None = None) -> None:
        self.config = config
        self.bucket = bucket
        self.paused = False
        self.overrides: RuntimeOverrides | None = None
        self.ignored: dict[str, str] = {}
        self.poll_interval_ms = config.poll_interval_ms
        self.claim_batch_size = config.claim_batch_size
        self.deadline_ms = config.deadline_ms
        self.rate_limit: float | None = config.rate
        # The fleet's view of this queue, as last read.
        self.limits: QueueLimits | None = None
        self.pool_member: PoolMember | None = None
        self.pool_total: int | None = None
        self.fleet_running: int | None = None
        self._warned: dict[str, Any] = {}  # override key → the refused value last logged

    @property
    def coordinated(self) -> bool:
        """True when the fleet limits this queue: claims go through the fleet's locks."""
        return self.limits is not None or self.pool_member is not None

    # -- applying a control row ------------------------------------------------------

    def apply(self, row: dict[str, Any] | None) -> None:
        """Adopt a freshly read control row (None: no row, nothing overridden or limited)."""
        self.paused = bool(row and row["paused"])
        self.overrides = runtime_overrides(row)
        ignored: dict[str, str] = {}
        o = self.overrides or _NO_OVERRIDES
        self.poll_interval_ms = o.poll_interval_ms or self.config.poll_interval_ms
        self.claim_batch_size = o.claim_batch_size or self.config.claim_batch_size
        self.deadline_ms = self._effective_deadline(o.deadline_ms, ignored)
        self._apply_rate(o.rate_limit)
        self.ignored = ignored
        # A refusal no longer in force is forgotten, so refusing it again logs again.
        self._warned = {k: v for k, v in self._warned.items() if k in ignored}
        self.limits = control_limits(row)
        self.pool_member = control_pool_member(row)
        self.pool_total = row.get("pool_total") if row else None
        self.fleet_running = row.get("fleet_running") if row else None

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

    def _apply_rate(self, override: float | None) -> None:
        """The start-time limiter, retuned by an override; an override on a queue started
        without one creates one, and clearing that override removes it."""
        if override is None:
            rate, burst = self.config.rate, self.config.burst
        else:
            rate, burst = override, 0  # burst 0 → ceil(rate)
        self.rate_limit = rate
        if rate is None or burst is None:
            self.bucket = None
            return
        if self.bucket is None:
            self.bucket = TokenBucket(rate, burst)
            return
        target = TokenBucket(rate, burst)  # resolves burst 0 → ceil(rate)
        if (target.rate, target.burst) != (self.bucket.rate, self.bucket.burst):
            self.bucket.reconfigure(rate, burst)

    def _refuse(self, key: str, value: Any, reason: str, ignored: dict[str, str]) -> None:
        ignored[key] = reason
        if self._warned.get(key, _NOTHING) != value:
            self._warned[key] = value
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

    def state(self) -> tuple[Any, ...]:
        """Everything a change of which the dispatcher must hear about at once."""
        return (
            self.effective_values(),
            dict(self.ignored),
            self.paused,
            self.limits,
            self.pool_member,
            self.pool_total,
        )

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


_NOTHING = object()
