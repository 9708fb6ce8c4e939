"""Every instrument awa exports, named once for Prometheus and once for OpenTelemetry.

This table is the single source: the Prometheus registry, the OTel meter, the tests and
``docs/metrics.md`` all follow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from awa.override_keys import KEYS

Kind = Literal["counter", "histogram", "gauge"]

# 1 ms … 5 min: handlers and pickup latencies span that whole range.
SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

DEPTH_STATES = ("available", "scheduled", "retryable", "running", "failed")
OVERRIDE_SETTINGS = KEYS


@dataclass(frozen=True, slots=True)
class Instrument:
    """One metric: its Prometheus name (without ``_total``), OTel name, labels and help."""

    name: str
    otel_name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    unit: str = "1"

    @property
    def exposed_name(self) -> str:
        """The name a scrape shows (counters gain ``_total``)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


JOBS = Instrument(
    "awa_jobs", "awa.jobs", "counter", ("queue", "kind", "outcome"),
    "Job outcomes committed by this worker; outcome is completed, retried, failed, "
    "cancelled, snoozed, handed_back or waiting_external.", "{job}",
)  # fmt: skip
RESCUED = Instrument(
    "awa_jobs_rescued", "awa.jobs.rescued", "counter", ("queue", "kind", "reason"),
    "Jobs returned by the maintenance leader; reason is heartbeat, deadline or "
    "callback_timeout.",
    "{job}",
)  # fmt: skip
CLAIMED = Instrument(
    "awa_jobs_claimed", "awa.jobs.claimed", "counter", ("queue",),
    "Jobs claimed by this worker's dispatchers.", "{job}",
)  # fmt: skip
STALE = Instrument(
    "awa_completions_stale", "awa.completions.stale", "counter", ("queue", "kind"),
    "Outcomes refused because their attempt had lost its lease (rescued or cancelled).",
    "{job}",
)  # fmt: skip
STOPPED = Instrument(
    "awa_jobs_stopped", "awa.jobs.stopped", "counter", ("queue", "kind", "reason"),
    "Handlers this worker stopped before they returned, by reason.", "{job}",
)  # fmt: skip
RATE_LIMITED = Instrument(
    "awa_polls_rate_limited", "awa.polls.rate_limited", "counter", ("queue",),
    "Dispatcher polls that the queue's rate limit cut short.", "{poll}",
)  # fmt: skip
OVERRIDES_APPLIED = Instrument(
    "awa_overrides_applied", "awa.overrides.applied", "counter", ("queue",),
    "Changes of a queue's effective settings after a runtime override was set or cleared.",
    "{change}",
)  # fmt: skip
OVERRIDES_IGNORED = Instrument(
    "awa_overrides_ignored", "awa.overrides.ignored", "counter", ("queue", "setting"),
    "Runtime overrides a guard rail refused (counted once per refused value).", "{override}",
)  # fmt: skip
FLEET_HOLDS = Instrument(
    "awa_fleet_holds", "awa.fleet.holds", "counter", ("queue", "reason"),
    "Claims of this worker that the fleet held back; reason is concurrency, partition, "
    "pool or rate.", "{claim}",
)  # fmt: skip
DURATION = Instrument(
    "awa_job_duration_seconds", "awa.job.duration", "histogram", ("queue",),
    "Handler run time per attempt.", "s",
)  # fmt: skip
PICKUP = Instrument(
    "awa_job_pickup_latency_seconds", "awa.job.pickup_latency", "histogram", ("queue",),
    "Time from a job's run_at to the start of its attempt.", "s",
)  # fmt: skip
DEPTH = Instrument(
    "awa_queue_depth", "awa.queue.depth", "gauge", ("queue", "state"),
    "Jobs per queue and state (available, scheduled, retryable, running, failed), "
    "from queue_stats(): the same for every process.", "{job}",
)  # fmt: skip
LAG = Instrument(
    "awa_queue_lag_seconds", "awa.queue.lag", "gauge", ("queue",),
    "Age of the oldest available job (0 when none waits), from queue_stats().", "s",
)  # fmt: skip
PAUSED = Instrument(
    "awa_queue_paused", "awa.queue.paused", "gauge", ("queue",),
    "1 while the queue is paused, from queue_stats().",
)  # fmt: skip
STATS_AGE = Instrument(
    "awa_queue_stats_age_seconds", "awa.queue.stats_age", "gauge", (),
    "Seconds since depth, lag and pause were read from the database: a scrape serves the "
    "last read while a new one fails or is slow, so alert when this grows.", "s",
)  # fmt: skip
IN_FLIGHT = Instrument(
    "awa_queue_in_flight", "awa.queue.in_flight", "gauge", ("queue",),
    "Jobs whose handler runs now in this worker.", "{job}",
)  # fmt: skip
CAPACITY = Instrument(
    "awa_queue_capacity", "awa.queue.capacity", "gauge", ("queue",),
    "Most permits the queue can hold in this worker: max_workers (hard-reserved) or "
    "min_workers plus the whole overflow pool (weighted).", "{job}",
)  # fmt: skip
OVERFLOW_HELD = Instrument(
    "awa_queue_overflow_held", "awa.queue.overflow_held", "gauge", ("queue",),
    "Shared overflow permits the queue holds now (weighted mode; 0 otherwise).", "{job}",
)  # fmt: skip
IGNORED_ACTIVE = Instrument(
    "awa_overrides_ignored_active", "awa.overrides.ignored_active", "gauge",
    ("queue", "setting"), "1 while a stored override of this setting is being ignored.",
)  # fmt: skip
FLEET_LIMIT_CONCURRENCY = Instrument(
    "awa_fleet_limit_concurrency", "awa.fleet.limit.concurrency", "gauge", ("queue",),
    "The queue's fleet-wide concurrency cap (per key when partitioned); absent: no cap.",
    "{job}",
)  # fmt: skip
FLEET_LIMIT_RATE = Instrument(
    "awa_fleet_limit_rate", "awa.fleet.limit.rate", "gauge", ("queue",),
    "The queue's fleet-wide rate limit in jobs per second (per key when partitioned); "
    "absent: no rate limit.", "{job}/s",
)  # fmt: skip
FLEET_RUNNING = Instrument(
    "awa_fleet_running", "awa.fleet.running", "gauge", ("queue",),
    "Jobs of a fleet-limited or fleet-pool queue running across the whole fleet.", "{job}",
)  # fmt: skip
FLEET_POOL_TOTAL = Instrument(
    "awa_fleet_pool_total", "awa.fleet.pool.total", "gauge", (),
    "Most jobs the fleet pool's members run at once, fleet-wide; absent: no pool.", "{job}",
)  # fmt: skip
FLEET_POOL_MIN_WORKERS = Instrument(
    "awa_fleet_pool_min_workers", "awa.fleet.pool.min_workers", "gauge", ("queue",),
    "A fleet-pool member's guaranteed minimum.", "{job}",
)  # fmt: skip
FLEET_POOL_WEIGHT = Instrument(
    "awa_fleet_pool_weight", "awa.fleet.pool.weight", "gauge", ("queue",),
    "A fleet-pool member's weight in the sharing of the rest of the pool.",
)  # fmt: skip

COUNTERS = (
    JOBS, RESCUED, CLAIMED, STALE, STOPPED, RATE_LIMITED, FLEET_HOLDS, OVERRIDES_APPLIED,
    OVERRIDES_IGNORED,
)  # fmt: skip
HISTOGRAMS = (DURATION, PICKUP)
STATS_GAUGES = (DEPTH, LAG, PAUSED, STATS_AGE)
WORKER_GAUGES = (IN_FLIGHT, CAPACITY, OVERFLOW_HELD, IGNORED_ACTIVE)
# Fleet-wide values: from a worker's last control refresh, or (a process running no
# worker, such as the dashboard) read from the database at scrape time.
FLEET_GAUGES = (
    FLEET_LIMIT_CONCURRENCY, FLEET_LIMIT_RATE, FLEET_RUNNING, FLEET_POOL_TOTAL,
    FLEET_POOL_MIN_WORKERS, FLEET_POOL_WEIGHT,
)  # fmt: skip
GAUGES = STATS_GAUGES + WORKER_GAUGES + FLEET_GAUGES
ALL = COUNTERS + HISTOGRAMS + GAUGES
