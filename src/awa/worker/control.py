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

Live concurrency (the record's Tier 2, CONTRACT §10): ``max_workers`` in hard-reserved
mode, ``min_workers`` and ``weight`` in weighted mode, applied to the permits by the
worker. An override for the other mode is refused (it would mean nothing), and so are
``min_workers`` overrides that would take Σ min_workers over ``global_max_workers`` —
decided across all queues by :func:`minimums_refusal` before each refresh is applied.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from awa.config import DEFAULT_POLL_INTERVAL_MS, QueueConfig
from awa.db.rows import control_limits, control_pool_member, runtime_overrides
from awa.override_keys import KEYS
from awa.types import Capacity, PoolMember, QueueLimits, QueueRuntime, RuntimeOverrides
from awa.validate import INT32_MAX, MAX_RATE, MIN_RATE
from awa.worker.rate_limit import TokenBucket

logger = logging.getLogger("awa")

_NO_OVERRIDES = RuntimeOverrides(None, None, None, None, None)
_HARD_ONLY = frozenset({"max_workers"})
_WEIGHTED_ONLY = frozenset({"min_workers", "weight"})


class QueueControl:
    """Configured, stored and effective settings of one queue in this worker."""

    def __init__(
        self,
        config: QueueConfig,
        bucket: TokenBucket | None = None,
        *,
        weighted: bool = False,
        refresh_ms: float = math.inf,
    ) -> None:
        self.config = config
        self.refresh_ms = refresh_ms  # the control refresh cadence: no poll sleeps longer
        self.bucket = bucket
        self.weighted = weighted
        self.paused = False
        self.overrides: RuntimeOverrides | None = None
        self.ignored: dict[str, str] = {}
        self.poll_interval_ms = self._configured_poll_ms()
        self.claim_batch_size = config.claim_batch_size
        self.deadline_ms = config.deadline_ms
        self.rate_limit: float | None = config.rate
        self.max_workers = config.max_workers
        self.min_workers = config.min_workers
        self.weight = config.weight
        # The fleet's view of this queue, as last read.
        self.limits: QueueLimits | None = None
        self.pool_member: PoolMember | None = None
        self.pool_total: int | None = None
        self.fleet_running: int | None = None
        self.fleet_top_partitions: list[tuple[str, int]] = []
        self._warned: dict[str, str] = {}  # override key → repr of the refused value logged

    def _configured_poll_ms(self) -> int:
        """The queue's own poll interval (build_worker_config gives every queue one)."""
        return self.config.poll_interval_ms or DEFAULT_POLL_INTERVAL_MS

    @property
    def poll_sleep_s(self) -> float:
        """How long a poll waits: the poll interval, never longer than the refresh cadence
        (CONTRACT §5), so a queue polled rarely still notices what a lost notice missed
        as soon as its settings would."""
        return min(self.poll_interval_ms, self.refresh_ms) / 1000

    @property
    def coordinated(self) -> bool:
        """True when the fleet limits this queue: claims go through the fleet's locks."""
        return self.limits is not None or self.pool_member is not None

    # -- applying a control row ------------------------------------------------------

    def apply(self, row: dict[str, Any] | None, *, minimums_refused: str | None = None) -> None:
        """Adopt a freshly read control row (None: no row, nothing overridden or limited).

        ``minimums_refused`` is the reason, decided across every queue, why a
        ``min_workers`` override cannot be applied now (see :func:`minimums_refusal`).
        """
        self.paused = bool(row and row["paused"])
        self.overrides = runtime_overrides(row)
        ignored: dict[str, str] = {}
        o = self.overrides or _NO_OVERRIDES
        self.poll_interval_ms = o.poll_interval_ms or self._configured_poll_ms()
        self.claim_batch_size = o.claim_batch_size or self.config.claim_batch_size
        self.deadline_ms = self._effective_deadline(o.deadline_ms, ignored)
        self._apply_rate(self._usable_rate(o.rate_limit, ignored))
        self._apply_concurrency(o, minimums_refused, ignored)
        self.ignored = ignored
        # A refusal no longer in force is forgotten, so refusing it again logs again.
        self._warned = {k: v for k, v in self._warned.items() if k in ignored}
        self.limits = control_limits(row)
        self.pool_member = control_pool_member(row)
        self.pool_total = row.get("pool_total") if row else None
        self.fleet_running = row.get("fleet_running") if row else None
        top = row.get("fleet_top_partitions") if row else None
        self.fleet_top_partitions = [(key, n) for key, n in top or ()]

    def _effective_deadline(self, override: int | None, ignored: dict[str, str]) -> int:
        configured = self.config.deadline_ms
        if override is None:
            return configured
        if override > INT32_MAX:  # by hand, before migration 0035 bounded the column
            reason = f"deadline override {override} ms is over {INT32_MAX} ms (24.8 days)"
            self._refuse("deadline_ms", override, reason, ignored)
            return configured
        if (override == 0) != (configured == 0):
            reason = (
                f"deadline override {override} ms would cross the zero boundary "
                f"(started with deadline_ms={configured}); restart to change it"
            )
            self._refuse("deadline_ms", override, reason, ignored)
            return configured
        return override

    def _apply_concurrency(
        self, o: RuntimeOverrides, minimums_refused: str | None, ignored: dict[str, str]
    ) -> None:
        c = self.config
        wanted = {"max_workers": o.max_workers, "min_workers": o.min_workers, "weight": o.weight}
        other_mode = _HARD_ONLY if self.weighted else _WEIGHTED_ONLY
        for key in sorted(other_mode):
            if wanted[key] is not None:
                mode = "weighted" if self.weighted else "hard-reserved"
                reason = f"{key} override {wanted[key]} ignored: it has no meaning in {mode} mode"
                self._refuse(key, wanted[key], reason, ignored)
                wanted[key] = None
        if wanted["min_workers"] is not None and minimums_refused is not None:
            self._refuse("min_workers", wanted["min_workers"], minimums_refused, ignored)
            wanted["min_workers"] = None
        self.max_workers = c.max_workers if wanted["max_workers"] is None else wanted["max_workers"]
        self.min_workers = c.min_workers if wanted["min_workers"] is None else wanted["min_workers"]
        self.weight = c.weight if wanted["weight"] is None else wanted["weight"]

    def _usable_rate(self, override: float | None, ignored: dict[str, str]) -> float | None:
        """The rate override, unless a row written by hand holds one no bucket can run
        at (the API and the CLI refuse them; the table took NaN before migration 0023)."""
        if override is None or MIN_RATE <= override <= MAX_RATE:
            return override
        reason = f"rate override {override!r} is not between {MIN_RATE:g} and {MAX_RATE:g} jobs/s"
        self._refuse("rate_limit", override, reason, ignored)
        return None

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
        if self._warned.get(key, _NOTHING) != repr(value):  # repr: NaN equals itself
            self._warned[key] = repr(value)
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
            "max_workers": c.max_workers,
            "min_workers": c.min_workers,
            "weight": c.weight,
        }

    def stored_overrides(self) -> dict[str, Any]:
        """The override columns as last read (None where not set)."""
        o = self.overrides or _NO_OVERRIDES
        return {key: getattr(o, key) for key in KEYS}

    def effective_values(self) -> dict[str, Any]:
        """What the dispatcher and the permits use now."""
        return {key: getattr(self, key) for key in KEYS}

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
_NEVER = datetime.min.replace(tzinfo=UTC)


def minimums_refusal(
    controls: Iterable[QueueControl],
    rows: Mapping[str, dict[str, Any]],
    global_max_workers: int | None,
) -> dict[str, str]:
    """Per queue, why its ``min_workers`` override in ``rows`` cannot apply now; queues
    absent from the result apply theirs. In weighted mode Σ min_workers must stay within
    ``global_max_workers``, the rule ``start()`` enforces (MinWorkersExceedGlobal). When
    the overrides together would break it, they are taken in the order they were written
    (``override_min_workers_at``, then queue name), each applying if it fits beside those
    taken before: an override in force is not displaced by a later write to another
    queue, a refused one never counts against another, and every worker with the same
    start-time settings decides the same from the same rows, whatever it applied before."""
    if global_max_workers is None:
        return {}
    controls = list(controls)
    configured = {c.config.name: c.config.min_workers for c in controls}
    overrides = {
        c.config.name: value for c in controls if (value := _min_override(rows, c)) is not None
    }

    def total(applied: set[str]) -> int:
        """Σ min_workers with the overrides of ``applied`` in force, the rest configured."""
        return sum(overrides[n] if n in applied else configured[n] for n in configured)

    def written(name: str) -> tuple[bool, datetime, str]:
        row = rows[name]  # (a worker older than migration 0027 reads no min stamp)
        stamp = row.get("override_min_workers_at") or row.get("overrides_updated_at")
        return (stamp is not None, stamp or _NEVER, name)  # unstamped (by hand) first

    if total(set(overrides)) <= global_max_workers:
        return {}
    applied: set[str] = set()
    refused: dict[str, str] = {}
    for name in sorted(overrides, key=written):
        with_it = total(applied | {name})
        if with_it <= global_max_workers:
            applied.add(name)
        else:
            refused[name] = (
                f"min_workers override ignored: with it Σ min_workers would be {with_it}, "
                f"over global_max_workers ({global_max_workers})"
            )
    return refused


def _min_override(rows: Mapping[str, dict[str, Any]], control: QueueControl) -> int | None:
    row = rows.get(control.config.name)
    value = row.get("override_min_workers") if row else None
    return None if value is None else int(value)
