"""The nouns of awa: job states, jobs, queue statistics and runtime reports.

A leaf module: it imports nothing else from awa, so every layer can use it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

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


class JobContext(Protocol):
    """What a running job can ask of the worker that runs it."""

    def is_cancelled(self) -> bool: ...


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
    _context: JobContext | None = field(default=None, repr=False, compare=False)

    def is_cancelled(self) -> bool:
        """True once the worker wants this attempt to stop (deadline, cancel, shutdown)."""
        return self._context is not None and self._context.is_cancelled()


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


@dataclass(frozen=True, slots=True)
class RuntimeOverrides:
    """The operator's stored overrides for one queue (``None`` = use the start-time value)."""

    poll_interval_ms: int | None
    claim_batch_size: int | None
    rate_limit: float | None
    deadline_ms: int | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class HardReserved:
    """Capacity of a queue in hard-reserved mode: its own ``max_workers`` permits."""

    max_workers: int


@dataclass(frozen=True, slots=True)
class Weighted:
    """Capacity of a queue in weighted mode: local minimum, weight and overflow held now."""

    min_workers: int
    weight: int
    overflow_held: int


Capacity = HardReserved | Weighted


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """Live numbers of one queue in this process."""

    in_flight: int
    available: int
    capacity: Capacity
    paused: bool = False


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """What ``health_check()`` reports; ``healthy`` is the one bit to alert on."""

    healthy: bool
    postgres_connected: bool
    poll_loop_alive: bool
    heartbeat_alive: bool
    shutting_down: bool
    leader: bool
    queues: dict[str, QueueHealth]


@dataclass(frozen=True, slots=True)
class QueueRuntime:
    """Configured, stored-override and effective values of one queue in one worker."""

    configured: dict[str, Any]
    overrides: dict[str, Any]
    effective: dict[str, Any]
    ignored: dict[str, str]
    capacity: Capacity
    in_flight: int
    paused: bool


@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    """A worker process's view of itself, also published to ``awa.runtime_instances``."""

    instance_id: str
    hostname: str
    pid: int
    started_at: datetime
    leader: bool
    mode: str
    global_max_workers: int | None
    queues: dict[str, QueueRuntime]


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
