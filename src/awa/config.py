"""Worker configuration: queue configs, start-time settings, validated in one place.

Everything here is I/O-free. ``build_worker_config`` turns whatever ``start()`` was given
into frozen dataclasses or raises a :class:`~awa.errors.BuildError` naming the field.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict

from awa import validate
from awa.errors import (
    BuildError,
    DuplicateQueue,
    InvalidClaimBatchSize,
    InvalidRateLimit,
    InvalidSetting,
    InvalidWeight,
    InvalidWorkers,
    MinWorkersExceedGlobal,
    NoQueuesConfigured,
    ValidationError,
)
from awa.types import bucket_size

DEFAULT_QUEUE = "default"
# A job's priority and attempts when its producer names none. They are also the column
# defaults of awa.jobs, which a bulk insert of default rows leaves to the table (COPY of
# fewer columns, job_copy_in_defaults): a test holds the two equal.
DEFAULT_PRIORITY = 2
DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_POLL_INTERVAL_MS = 200  # a queue's, when neither it nor start() names one
LEADER_ELECTION_INTERVAL_MS = 5_000
# A worker counts as live while it reported within 30 s (explain, the fleet pool's share
# per process, awa.pool_process_part): a snapshot interval past a third of that made a
# healthy worker look stopped between two reports (a review).
MAX_SNAPSHOT_INTERVAL_MS = 10_000
LEADER_LEASE_MS = 15_000
# How long the maintenance leader keeps a silent worker's awa.runtime_instances row.
INSTANCE_EXPIRY_MS = 5 * 60_000
# A worker that has not published its snapshot for this long (three missed reports at
# the default interval) no longer counts as live: explain, `awa queue limits show` and
# `awa queue overrides show` judge liveness by it.
LIVE_WITHIN_MS = 30_000
# The most pooled connections a client may hold: past any server's max_connections, a
# larger number is a typo (10**14 was taken; a review).
MAX_CONNECTIONS = 10_000
logger = logging.getLogger("awa")


def database_url_source(explicit: str | None) -> str:
    """Where :func:`resolve_database_url` takes the URL from: ``database_url`` (the
    argument) or the environment variable's name — what a malformed URL is blamed on."""
    if explicit:
        return "database_url"
    return "AWA_DATABASE_URL" if os.environ.get("AWA_DATABASE_URL") else "DATABASE_URL"


def resolve_database_url(explicit: str | None = None) -> str | None:
    """Explicit argument > ``AWA_DATABASE_URL`` > ``DATABASE_URL`` (None when none is set)."""
    for candidate in (explicit, os.environ.get("AWA_DATABASE_URL"), os.environ.get("DATABASE_URL")):
        if candidate:
            return candidate
    return None


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """How one queue runs in this worker. Defaults follow the public contract."""

    name: str
    max_workers: int = 50
    min_workers: int = 0
    weight: int = 1
    rate_limit: tuple[float, int] | None = None
    # None: the worker's (``start(poll_interval_ms=…)``, 200 by default).
    poll_interval_ms: int | None = None
    claim_batch_size: int = 512
    deadline_ms: int = 300_000
    priority_aging_interval_ms: int = 60_000
    # Stored per queue for the whole fleet: True dead-letters its failed jobs, False stops
    # that; None (not stated) leaves the stored flag as it is (off for a new queue), so a
    # worker that does not say — `awa worker`, another service — never turns a DLQ off.
    dlq: bool | None = None

    @property
    def rate(self) -> float | None:
        """Jobs per second allowed, or None when unlimited."""
        return self.rate_limit[0] if self.rate_limit else None

    @property
    def burst(self) -> int | None:
        """Token bucket size (a configured burst of 0 means ceil(rate))."""
        if self.rate_limit is None:
            return None
        return bucket_size(*self.rate_limit)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Validated settings for one worker process."""

    queues: tuple[QueueConfig, ...]
    global_max_workers: int | None = None
    heartbeat_interval_ms: int = 30_000
    heartbeat_staleness_ms: int = 90_000
    heartbeat_rescue_interval_ms: int = 30_000
    deadline_rescue_interval_ms: int = 30_000
    promote_interval_ms: int = 250
    leader_election_interval_ms: int = LEADER_ELECTION_INTERVAL_MS
    leader_lease_ms: int = LEADER_LEASE_MS
    max_args_bytes_in_flight: int = 64 * 1024 * 1024
    runtime_snapshot_interval_ms: int = 10_000
    completed_retention_ms: int = 24 * 3_600_000
    failed_retention_ms: int = 7 * 24 * 3_600_000
    override_refresh_ms: int = 10_000
    cron_interval_ms: int = 1_000
    callback_rescue_interval_ms: int = 1_000
    dlq_retention_ms: int = 30 * 24 * 3_600_000
    vacuum_dead_rows: int = 20_000  # the leader vacuums awa.jobs past this (0: never)
    synchronous_commit: bool = False
    # Free permits an idle queue parks as handoff seats (ADR 0045; 0: off): a job inserted
    # for it is claimed at its insert's commit and handed over in the commit's notice.
    handoff_seats: int = 4

    @property
    def weighted(self) -> bool:
        """True when queues share one global pool (design record 011)."""
        return self.global_max_workers is not None

    @property
    def total_permits(self) -> int:
        """The most handlers this process may run at once."""
        if self.global_max_workers is not None:
            return self.global_max_workers
        return sum(q.max_workers for q in self.queues)


_QUEUE_FIELDS = {f.name for f in fields(QueueConfig)}

QueueSpec = str | tuple[str, int] | Mapping[str, Any] | QueueConfig


def _queue_from_spec(spec: QueueSpec, poll_interval_ms: int) -> QueueConfig:
    if isinstance(spec, QueueConfig):
        if spec.poll_interval_ms is None:
            return replace(spec, poll_interval_ms=poll_interval_ms)
        return spec
    if isinstance(spec, str):
        return QueueConfig(spec, poll_interval_ms=poll_interval_ms)
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise InvalidSetting("queues", f"tuple form is (name, max_workers), got {spec!r}")
        return QueueConfig(spec[0], max_workers=spec[1], poll_interval_ms=poll_interval_ms)
    if isinstance(spec, Mapping):
        unknown = set(spec) - _QUEUE_FIELDS
        if unknown:
            raise InvalidSetting(
                "queues", f"unknown queue setting(s): {', '.join(sorted(unknown))}"
            )
        if "name" not in spec:
            raise InvalidSetting("queues", f"dict form needs a 'name', got {dict(spec)!r}")
        values = {**spec}
        if values.get("poll_interval_ms") is None:
            values["poll_interval_ms"] = poll_interval_ms
        if isinstance(values.get("rate_limit"), list):
            values["rate_limit"] = tuple(values["rate_limit"])
        return QueueConfig(**values)
    raise InvalidSetting("queues", f"unsupported queue specification {spec!r}")


def _check_queue(q: QueueConfig) -> None:
    try:
        validate.name("name", q.name)
    except ValidationError as exc:
        raise InvalidSetting(f"queues[{q.name!r}].name", exc.reason) from None
    where = f"queues[{q.name!r}]"
    # Each bound is its runtime override's (a PostgreSQL integer), so a value that starts
    # can also be set live.
    top = validate.INT32_MAX
    validate.integer(f"{where}.max_workers", q.max_workers, low=1, high=top, error=InvalidWorkers)
    validate.integer(f"{where}.min_workers", q.min_workers, low=0, high=top, error=InvalidWorkers)
    if isinstance(q.weight, bool) or not isinstance(q.weight, int) or not 1 <= q.weight <= top:
        raise InvalidWeight(q.name, q.weight)
    if isinstance(q.claim_batch_size, bool) or not isinstance(q.claim_batch_size, int):
        raise InvalidClaimBatchSize(q.name, q.claim_batch_size)
    if not 1 <= q.claim_batch_size <= top:
        raise InvalidClaimBatchSize(q.name, q.claim_batch_size)
    for setting, low in (("poll_interval_ms", 1), ("deadline_ms", 0),
                         ("priority_aging_interval_ms", 0)):  # fmt: skip
        value = getattr(q, setting)
        validate.integer(f"{where}.{setting}", value, low=low, high=top, error=InvalidSetting)
    if q.dlq is not None and not isinstance(q.dlq, bool):
        raise InvalidSetting(f"{where}.dlq", f"must be True, False or None, got {q.dlq!r}")
    if q.rate_limit is not None:
        _check_rate_limit(q)


def _check_rate_limit(q: QueueConfig) -> None:
    rl = q.rate_limit
    if not isinstance(rl, tuple) or len(rl) != 2:
        raise InvalidRateLimit(q.name, f"must be (max_rate, burst), got {rl!r}")
    rate, burst = rl
    validate.rate("max_rate", rate, error=lambda f, why: InvalidRateLimit(q.name, f"{f} {why}"))
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        raise InvalidRateLimit(q.name, f"burst must be an integer >= 0, got {burst!r}")


OVERRIDE_REFRESH_FLOOR_MS = 50


def floor_override_refresh_ms(value: int, source: str) -> tuple[int, str | None]:
    """The one rule for the override refresh cadence, whoever sets it: at least 50 ms
    (a shorter cadence would turn the control read into a per-poll query)."""
    if value < OVERRIDE_REFRESH_FLOOR_MS:
        floor = OVERRIDE_REFRESH_FLOOR_MS
        return floor, f"{source}={value} is below the {floor} ms floor; using {floor}"
    return value, None


def parse_override_refresh_ms(raw: str | None, default: int = 10_000) -> tuple[int, str | None]:
    """``AWA_OVERRIDE_REFRESH_MS`` → (milliseconds, warning or None); floored at 50."""
    if raw is None or raw.strip() == "":
        return default, None
    try:
        value = int(raw.strip())
    except ValueError:
        return default, f"AWA_OVERRIDE_REFRESH_MS={raw!r} is not an integer; using {default}"
    return floor_override_refresh_ms(value, "AWA_OVERRIDE_REFRESH_MS")


_BOOLEAN_SETTINGS = frozenset({"synchronous_commit"})
_ZERO_MEANS_OFF = frozenset({"vacuum_dead_rows", "handoff_seats"})


class StartSettings(TypedDict, total=False):
    """The keyword settings ``start()`` takes besides its queues and ``global_max_workers``,
    typed so that a misspelt or mistyped one is a type checker's error, not only a
    start-time :class:`~awa.errors.InvalidSetting`. A test holds it equal to
    :class:`WorkerConfig`'s fields; README "Configuration" says what each does."""

    poll_interval_ms: int
    heartbeat_interval_ms: int
    heartbeat_staleness_ms: int
    heartbeat_rescue_interval_ms: int
    deadline_rescue_interval_ms: int
    promote_interval_ms: int
    leader_election_interval_ms: int
    leader_lease_ms: int
    max_args_bytes_in_flight: int
    runtime_snapshot_interval_ms: int
    completed_retention_ms: int
    failed_retention_ms: int
    override_refresh_ms: int
    cron_interval_ms: int
    callback_rescue_interval_ms: int
    dlq_retention_ms: int
    vacuum_dead_rows: int
    synchronous_commit: bool
    handoff_seats: int


START_SETTINGS = frozenset(StartSettings.__optional_keys__)
"""The names of :class:`StartSettings`."""


def is_boolean_setting(name: str) -> bool:
    """True for a ``start()`` setting that is on or off rather than a number."""
    return name in _BOOLEAN_SETTINGS


def build_worker_config(
    queues: Iterable[QueueSpec] | None,
    *,
    global_max_workers: int | None = None,
    **settings: Any,
) -> WorkerConfig:
    """Validate everything ``start()`` was given; raise a BuildError naming the field."""
    # The default poll interval of the queues (each QueueConfig may set its own).
    poll_interval_ms = settings.pop("poll_interval_ms", DEFAULT_POLL_INTERVAL_MS)
    validate.integer(
        "poll_interval_ms", poll_interval_ms, low=1, high=validate.INT32_MAX, error=InvalidSetting
    )  # the queues' own bound: refused here, it names start()'s setting, not a queue
    if isinstance(queues, str | bytes | Mapping):  # iterable, but not a list of queues
        raise InvalidSetting(
            "queues", f"must be a list of queue specs, e.g. [('email', 10)], got {queues!r}"
        )
    specs = list(queues or ())
    if not specs:
        raise NoQueuesConfigured()
    configs = tuple(_queue_from_spec(spec, poll_interval_ms) for spec in specs)
    seen: set[str] = set()
    for q in configs:
        _check_queue(q)
        if q.name in seen:
            raise DuplicateQueue(q.name)
        seen.add(q.name)
    if global_max_workers is not None:
        validate.integer("global_max_workers", global_max_workers, low=1, error=InvalidWorkers)
        total_min = sum(q.min_workers for q in configs)
        if total_min > global_max_workers:
            raise MinWorkersExceedGlobal(total_min, global_max_workers)
    unknown = set(settings) - START_SETTINGS
    if unknown:
        raise InvalidSetting("start", f"unknown setting(s): {', '.join(sorted(unknown))}")
    for name, value in settings.items():
        if name in _BOOLEAN_SETTINGS:
            if not isinstance(value, bool):
                raise InvalidSetting(name, f"must be True or False, got {value!r}")
            continue
        low = 0 if name in _ZERO_MEANS_OFF else 1
        # Durations reach PostgreSQL as milliseconds (intervals, bigints); counts as integers.
        high = validate.MAX_DURATION_MS if name.endswith("_ms") else validate.INT32_MAX
        validate.integer(name, value, low=low, high=high, error=InvalidSetting)
    if "override_refresh_ms" in settings:
        refresh, warning = floor_override_refresh_ms(
            settings["override_refresh_ms"], "override_refresh_ms"
        )
    else:
        refresh, warning = parse_override_refresh_ms(os.environ.get("AWA_OVERRIDE_REFRESH_MS"))
    if warning:
        logger.warning(warning)
    settings["override_refresh_ms"] = refresh
    if "leader_lease_ms" not in settings:  # three missed renewals, and never under 15 s
        interval = settings.get("leader_election_interval_ms", LEADER_ELECTION_INTERVAL_MS)
        settings["leader_lease_ms"] = max(LEADER_LEASE_MS, 3 * interval)
    config = WorkerConfig(queues=configs, global_max_workers=global_max_workers, **settings)
    if config.heartbeat_staleness_ms <= config.heartbeat_interval_ms:
        raise InvalidSetting(
            "heartbeat_staleness_ms",
            f"must exceed heartbeat_interval_ms ({config.heartbeat_interval_ms}), "
            f"got {config.heartbeat_staleness_ms}",
        )
    if config.runtime_snapshot_interval_ms > MAX_SNAPSHOT_INTERVAL_MS:
        raise InvalidSetting(
            "runtime_snapshot_interval_ms",
            f"must be at most {MAX_SNAPSHOT_INTERVAL_MS} (a worker that has not reported for "
            f"30 s counts as stopped), got {config.runtime_snapshot_interval_ms}",
        )
    if config.leader_lease_ms < 2 * config.leader_election_interval_ms:
        raise InvalidSetting(
            "leader_lease_ms",
            "must be at least twice leader_election_interval_ms (the leader renews its "
            f"lease every {config.leader_election_interval_ms} ms), "
            f"got {config.leader_lease_ms}",
        )
    return config


__all__ = [
    "DEFAULT_QUEUE",
    "BuildError",
    "QueueConfig",
    "WorkerConfig",
    "build_worker_config",
    "parse_override_refresh_ms",
    "resolve_database_url",
]
