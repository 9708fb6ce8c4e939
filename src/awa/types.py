"""The nouns of awa: job states, jobs, queue statistics and runtime reports.

Nearly a leaf: it imports only :mod:`awa.errors` (itself a leaf), so every layer can use it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeAlias, TypeVar

from awa.errors import WorkerNotRunning

T = TypeVar("T")


class JobState(enum.StrEnum):
    """Where a job is in its life. See ``docs/job-states.md`` for the diagram."""

    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    COMPLETED = "completed"
    RETRYABLE = "retryable"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING_EXTERNAL = "waiting_external"

    @property
    def is_final(self) -> bool:
        """True for states a job never leaves by itself."""
        return self in _FINAL_STATES


_FINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

# The states ``cancel(id)`` and ``retry(id)`` change (job_cancel.sql, job_retry.sql); a job
# in another state is returned as it is. The dashboard offers, and the CLI attempts, only
# what applies.
CANCEL_APPLIES_TO = frozenset(
    {JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE,
     JobState.WAITING_EXTERNAL}
)  # fmt: skip
RETRY_APPLIES_TO = frozenset(
    {JobState.SCHEDULED, JobState.RETRYABLE, JobState.FAILED, JobState.CANCELLED,
     JobState.COMPLETED, JobState.WAITING_EXTERNAL}
)  # fmt: skip


class RunningAttempt(Protocol):
    """The worker's attempt running a job (``awa.worker.attempt.Attempt``), as the job's
    methods reach it."""

    def is_cancelled(self) -> bool: ...
    def set_progress(self, percent: float, message: str | None, checkpoint: Any) -> None: ...
    def update_metadata(self, patch: Mapping[str, Any]) -> None: ...
    async def flush(self) -> bool: ...
    def flush_sync(self) -> bool: ...
    async def register_callback(self, timeout_seconds: float) -> str: ...
    def register_callback_sync(self, timeout_seconds: float) -> str: ...
    async def wait_for_callback(self, callback_id: str) -> Any: ...
    def wait_for_callback_sync(self, callback_id: str) -> Any: ...


KEEP_CHECKPOINT: Any = object()
"""``set_progress``'s default checkpoint: keep the one saved before."""


@dataclass(slots=True)
class Job(Generic[T]):
    """One job row. Inside a handler ``args`` is an instance of the registered type."""

    id: int
    kind: str
    queue: str
    args: T
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    run_lease: int
    tags: list[str]
    metadata: dict[str, Any]
    progress: dict[str, Any] | None
    errors: list[dict[str, Any]]
    created_at: datetime
    run_at: datetime
    attempted_at: datetime | None
    deadline_at: datetime | None
    finalized_at: datetime | None
    # Jobs sharing a key run one at a time in insertion order (ADR 0034); None: no key.
    ordering_key: str | None = None
    # Set while the id answers: the job waits on an external callback
    # (``waiting_external``), or runs in the attempt that registered it; the id
    # ``resume_external``/``complete_external``/``fail_external`` take.
    callback_id: str | None = None
    # The attempt running this job in a worker (set at launch); None outside a handler.
    _attempt: RunningAttempt | None = field(default=None, repr=False, compare=False)

    def is_cancelled(self) -> bool:
        """True once the worker wants this attempt to stop (deadline, cancel, shutdown)."""
        return self._attempt is not None and self._attempt.is_cancelled()

    def _running(self) -> RunningAttempt:
        if self._attempt is None:
            raise WorkerNotRunning(
                f"job {self.id} is not running in a worker: progress, metadata updates and "
                "callbacks are only available inside a handler"
            )
        return self._attempt

    @property
    def checkpoint(self) -> Any:
        """The checkpoint saved by ``set_progress(..., checkpoint=...)`` (kept across retries)."""
        return (self.progress or {}).get("checkpoint")

    def set_progress(
        self, percent: float, message: str | None = None, *, checkpoint: Any = KEEP_CHECKPOINT
    ) -> None:
        """Record progress (0–100) and optionally a JSON checkpoint to resume from.

        ``percent`` is clamped to 0–100 (``set_progress(101)`` records 100); only a value
        that is not a number (``nan``, ``True``, a string) raises ``ValidationError``.

        Written with the next heartbeat, at the attempt's outcome, or by
        :meth:`flush_progress`; kept across retries, cleared when the job completes.
        """
        self._running().set_progress(percent, message, checkpoint)

    def update_metadata(self, patch: Mapping[str, Any]) -> None:
        """Merge ``patch`` into the job's metadata (top-level keys), written like progress."""
        self._running().update_metadata(patch)

    async def flush_progress(self) -> bool:
        """Write pending progress and metadata now; False when the attempt lost its lease."""
        return await self._running().flush()

    def flush_progress_sync(self) -> bool:
        """:meth:`flush_progress` for plain ``def`` handlers (they run in a thread)."""
        return self._running().flush_sync()

    async def register_callback(self, timeout_seconds: float = 3600) -> str:
        """Create this attempt's callback id (a UUID string) for an external system.

        Return ``awa.WaitForCallback(callback_id)`` from the handler to park the job in
        ``waiting_external`` until ``complete_external``/``fail_external``/
        ``retry_external`` names the id or ``timeout_seconds`` pass.
        """
        return await self._running().register_callback(timeout_seconds)

    def register_callback_sync(self, timeout_seconds: float = 3600) -> str:
        """:meth:`register_callback` for plain ``def`` handlers."""
        return self._running().register_callback_sync(timeout_seconds)

    async def wait_for_callback(self, callback_id: str) -> Any:
        """Wait, inside this attempt, until ``resume_external(callback_id, payload)``;
        returns the payload. Register a new callback and wait again for the next step.

        ``callback_id`` must be what this attempt's latest ``register_callback`` returned.
        While waiting the job stays ``running`` (its ``callback_id`` set), the handler keeps
        its permit, and the attempt's deadline is paused: the callback's timeout bounds the
        wait, and :class:`~awa.errors.CallbackTimeout` is raised when it passes (an error
        like any other: retried, or failed on the last attempt). If the wait ends otherwise
        — completed, failed or retried from outside, cancelled — :class:`~awa.errors.
        CallbackEnded` is raised: the attempt is over.
        """
        return await self._running().wait_for_callback(callback_id)

    def wait_for_callback_sync(self, callback_id: str) -> Any:
        """:meth:`wait_for_callback` for plain ``def`` handlers."""
        return self._running().wait_for_callback_sync(callback_id)


StoredJob: TypeAlias = "Job[dict[str, Any]]"
"""A job as the database holds it — what ``insert``, ``get_job``, ``list_jobs``, ``cancel``
and the other client calls return: its ``args`` is the stored JSON object, a dict. Only
inside a handler is ``Job[T].args`` rebuilt as the task's ``T`` (typed as ``Job[Any]``,
``job.args.to`` on an inserted job type-checked and then failed: a review)."""


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A job as a listing shows it, from ``list_job_summaries()``: its row without the
    payload (args, metadata, progress, all errors but the last), so a page of 500 jobs
    costs the same whatever their args weigh."""

    id: int
    kind: str
    queue: str
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    tags: list[str]
    created_at: datetime
    run_at: datetime
    attempted_at: datetime | None
    finalized_at: datetime | None
    ordering_key: str | None
    # The message of the newest entry in ``errors`` (at most 4 000 characters), or None.
    last_error: str | None


@dataclass(frozen=True, slots=True)
class QueueStat:
    """Counts per state for one queue, as returned by ``queue_stats()``."""

    queue: str
    available: int
    scheduled: int
    running: int
    retryable: int
    failed: int
    cancelled: int
    waiting_external: int
    completed: int
    completed_last_hour: int
    lag_seconds: float | None
    paused: bool
    # Completions finalized in the last minute: a rate, where deltas of ``completed``
    # are not one (the pruner takes completions out of it as they pass retention).
    completed_last_minute: int = 0


@dataclass(frozen=True, slots=True)
class RuntimeOverrides:
    """The operator's stored overrides for one queue (``None`` = use the start-time value)."""

    poll_interval_ms: int | None
    claim_batch_size: int | None
    rate_limit: float | None
    deadline_ms: int | None
    updated_at: datetime | None
    # Live concurrency (design record 038 Tier 2, CONTRACT §10): per-process permits.
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int | None = None


@dataclass(frozen=True, slots=True)
class HardReserved:
    """Capacity of a queue in hard-reserved mode: its own ``max_workers`` permits."""

    max_workers: int


@dataclass(frozen=True, slots=True)
class Weighted:
    """Capacity of a queue in weighted mode: local minimum, weight and overflow held now;
    ``ceiling``, the most it could run at once (its minimum plus the whole overflow pool;
    None from a worker older than the field)."""

    min_workers: int
    weight: int
    overflow_held: int
    ceiling: int | None = field(default=None, compare=False)  # derived: min + the pool


Capacity = HardReserved | Weighted


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """Live numbers of one queue in this process."""

    in_flight: int
    available: int
    capacity: Capacity
    paused: bool = False
    stuck: int = 0
    progressing: bool = True


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """What ``health_check()`` reports; ``healthy`` is the one bit to alert on.

    Unhealthy: the database is unreachable, a loop died, the worker is shutting down, or
    a queue cannot make progress (``queues[q].progressing`` is False: every permit is
    held by a handler asked to stop that runs on). ``problems`` says which, one
    line each (empty when healthy), as ``awa health --worker`` prints them.
    """

    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    shutting_down: bool
    leader: bool
    queues: dict[str, QueueHealth]
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class QueueRuntime:
    """One queue in one worker: its settings (configured, stored overrides, effective,
    refused), its capacity and what runs now.

    ``in_flight`` counts the permits held (handlers running plus any reserved by a claim
    in progress), ``running`` the handlers running now, ``available`` the permits the
    queue could take at once; ``polling`` is False when its dispatch loop has died.
    ``stuck`` counts running handlers that were asked to stop, did not, and could not be
    abandoned (they keep their permits); ``abandoned`` handlers the worker gave up on
    that still run without a permit (ADR 0016).
    """

    configured: dict[str, Any]
    overrides: dict[str, Any]
    effective: dict[str, Any]
    ignored: dict[str, str]
    capacity: Capacity
    in_flight: int
    paused: bool
    # The fleet's limits on this queue as this worker last read them; None when neither
    # fleet limits nor the fleet pool cover the queue (and in rows of older workers).
    fleet: QueueFleet | None = None
    available: int = 0
    running: int = 0
    polling: bool = True
    stuck: int = 0
    abandoned: int = 0

    @property
    def progressing(self) -> bool:
        """False when the queue cannot run another job: no permit is free and every
        handler holding one is stuck."""
        return not (self.stuck > 0 and self.available == 0 and self.stuck >= self.running)


@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    """A worker process's view of itself: the one read model of a running worker.

    ``health_check()``, the metrics gauges and ``runtime_snapshot()`` read it, and it is
    published to ``awa.runtime_instances``. ``services`` maps each background service
    (``heartbeat``, ``listener``, ``completer``, ``leader``, …) to whether it is alive.
    """

    instance_id: str
    hostname: str
    pid: int
    started_at: datetime
    leader: bool
    mode: str
    global_max_workers: int | None
    queues: dict[str, QueueRuntime]
    # Ids of the jobs this process runs now, so ``explain`` can say where a job runs.
    running_job_ids: tuple[int, ...] = ()
    shutting_down: bool = False
    services: dict[str, bool] = field(default_factory=dict)
    # How long its jobs may go without a heartbeat before a leader rescues them: every
    # leader waits at least this long for the jobs of a queue this process serves.
    heartbeat_staleness_ms: int | None = None

    def problems(self) -> list[str]:
        """What keeps this worker from working, one line each (none: healthy) — the one
        definition ``health_check()`` and ``awa health --worker`` share."""
        problems = ["shutting down"] if self.shutting_down else []
        dead = sorted(name for name, alive in self.services.items() if not alive)
        if dead:
            problems.append(f"loops not running: {', '.join(dead)}")
        for name, q in sorted(self.queues.items()):
            if not q.progressing:
                problems.append(
                    f"queue {name} cannot make progress ({q.stuck} handler(s) asked to stop "
                    "— past their deadline, cancelled or their lease unconfirmed — still "
                    "hold every permit)"
                )
        return problems


@dataclass(frozen=True, slots=True)
class RuntimeInstance:
    """A live worker process as published in ``awa.runtime_instances``."""

    instance_id: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    is_leader: bool
    snapshot: RuntimeSnapshot | None
    # seconds since last_seen_at by the database's clock (not the reader's, which may be
    # minutes off on another host)
    seen_ago_s: float = 0.0


class ReasonCode(enum.StrEnum):
    """Why a job is where it is (CONTRACT §11); each compares equal to its string."""

    SCHEDULED = "scheduled"
    RETRY_BACKOFF = "retry_backoff"
    QUEUE_PAUSED = "queue_paused"
    RATE_LIMITED = "rate_limited"
    CONCURRENCY_LIMIT = "concurrency_limit"
    PARTITION_LIMIT = "partition_limit"
    POOL_LIMIT = "pool_limit"
    ORDERED_BEHIND = "ordered_behind"
    NO_LIVE_WORKER = "no_live_worker"
    WORKERS_BUSY = "workers_busy"
    QUEUED_BEHIND = "queued_behind"
    WAITING_EXTERNAL = "waiting_external"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a job is not running (or where it is), with its numbers.

    ``message`` is for people; ``details`` holds the same numbers for scripts (JSON-ready).
    """

    code: ReasonCode
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Explanation:
    """What ``explain(job_id)`` found: the job, its reasons (most decisive first) and a
    one-sentence ``summary``."""

    job: Job[Any]
    reasons: list[Reason]
    summary: str


def bucket_size(rate: float, burst: int | None) -> int:
    """A token bucket's size: ``burst``, or ``ceil(rate)`` when none (or 0) is given."""
    return burst if burst else math.ceil(rate)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Fleet-wide limits of one queue as stored (CONTRACT §8): they hold across every
    worker process and host. None means "no limit of that kind"."""

    queue: str
    concurrency: int | None
    rate_limit: float | None
    burst: int | None
    partition_by: str | None
    updated_at: datetime

    @property
    def effective_burst(self) -> int | None:
        """The fleet bucket's size (None: no rate limit)."""
        return None if self.rate_limit is None else bucket_size(self.rate_limit, self.burst)


@dataclass(frozen=True, slots=True)
class QueueLimitsStatus:
    """A limited queue with what the fleet runs now: ``running`` jobs in the database, the
    busiest partitions as ``(key, running)`` (partitioned queues), and the tokens left in
    the queue's bucket (rate-limited, unpartitioned queues)."""

    limits: QueueLimits
    running: int
    top_partitions: list[tuple[str, int]]
    tokens: float | None


@dataclass(frozen=True, slots=True)
class PoolMember:
    """A queue's place in the fleet pool: a guaranteed minimum and a weight (CONTRACT §9)."""

    min_workers: int = 0
    weight: int = 1


@dataclass(frozen=True, slots=True)
class FleetPool:
    """The fleet-wide weighted pool as stored, with each member's running jobs now."""

    total: int
    queues: dict[str, PoolMember]
    updated_at: datetime
    running: dict[str, int] = field(default_factory=dict)

    def busy_shares(self) -> dict[str, int]:
        """Each member's share while every member has waiting jobs, as the claims split
        it (``awa.pool_room``): its minimum, then of the rest one slot each when there is
        one for each, the remainder by weight, rounded down, the slots left over one each
        to the largest remainders (ties by queue name, in code point order)."""
        members = self.queues
        rest = max(self.total - sum(m.min_workers for m in members.values()), 0)
        first = 1 if members and rest >= len(members) else 0
        rest -= first * len(members)
        weights = sum(m.weight for m in members.values())
        exact = {q: rest * m.weight / weights for q, m in members.items()} if weights else {}
        parts = {q: int(x) for q, x in exact.items()}
        left = rest - sum(parts.values())
        for q in sorted(exact, key=lambda q: (-(exact[q] - parts[q]), q))[:left]:
            parts[q] += 1
        return {q: m.min_workers + first + parts.get(q, 0) for q, m in members.items()}


@dataclass(frozen=True, slots=True)
class QueueFleet:
    """The fleet's hold on one queue as one worker sees it (CONTRACT §8–§9).

    ``limits`` and ``pool_member`` (with the pool's ``pool_total``) as the worker last read
    them, ``running``: the queue's jobs running across the fleet at that read (it is
    refreshed every control cadence, so it lags by up to one), ``blocked``: why the fleet
    held back this worker's last claim (``concurrency``, ``partition``, ``pool``, ``rate``;
    None: it did not), ``holds``: claims the fleet held back since the worker started,
    ``top_partitions``: for a partitioned queue, its five busiest partitions at that read.
    """

    limits: QueueLimits | None = None
    pool_member: PoolMember | None = None
    pool_total: int | None = None
    running: int | None = None
    blocked: str | None = None
    holds: int = 0
    # A partitioned queue's busiest partitions at that read, as (key, running).
    top_partitions: list[tuple[str, int]] = field(default_factory=list)
