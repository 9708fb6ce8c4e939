"""awa — a Postgres-native background job queue.

Produce jobs with :class:`AsyncClient` (or its blocking twin :class:`Client`), register
handlers with ``@client.task``, run them with ``client.start()``. See README.md.
"""

from awa.client.async_client import AsyncClient
from awa.client.dlq import DeadLetter
from awa.client.sync_client import Client, SyncTransaction
from awa.client.transaction import Transaction
from awa.config import QueueConfig, WorkerConfig
from awa.errors import (
    AwaError,
    BuildError,
    CallbackNotFound,
    DatabaseError,
    DuplicateQueue,
    InvalidClaimBatchSize,
    InvalidRateLimit,
    InvalidSetting,
    InvalidWeight,
    InvalidWorkers,
    JobNotFound,
    MinWorkersExceedGlobal,
    MissingExtra,
    NoQueuesConfigured,
    ScheduleNotFound,
    SchemaNotMigrated,
    SchemaTooNew,
    SerializationError,
    TerminalError,
    UniqueConflict,
    ValidationError,
)
from awa.hooks import (
    JobCancelled,
    JobCompleted,
    JobEvent,
    JobExhausted,
    JobRetried,
    JobStarted,
)
from awa.kinds import derive_kind
from awa.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback
from awa.periodic import CronSchedule, PeriodicJob
from awa.types import (
    Explanation,
    HardReserved,
    HealthCheck,
    Job,
    JobState,
    QueueHealth,
    QueueRuntime,
    QueueStat,
    Reason,
    ReasonCode,
    RuntimeInstance,
    RuntimeOverrides,
    RuntimeSnapshot,
    Weighted,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AwaError",
    "BuildError",
    "CallbackNotFound",
    "Cancel",
    "Client",
    "CronSchedule",
    "DatabaseError",
    "DeadLetter",
    "DuplicateQueue",
    "Explanation",
    "HardReserved",
    "HealthCheck",
    "InvalidClaimBatchSize",
    "InvalidRateLimit",
    "InvalidSetting",
    "InvalidWeight",
    "InvalidWorkers",
    "Job",
    "JobCancelled",
    "JobCompleted",
    "JobEvent",
    "JobExhausted",
    "JobNotFound",
    "JobRetried",
    "JobStarted",
    "JobState",
    "MinWorkersExceedGlobal",
    "MissingExtra",
    "NoQueuesConfigured",
    "PeriodicJob",
    "QueueConfig",
    "QueueHealth",
    "QueueRuntime",
    "QueueStat",
    "Reason",
    "ReasonCode",
    "RetryAfter",
    "RuntimeInstance",
    "RuntimeOverrides",
    "RuntimeSnapshot",
    "ScheduleNotFound",
    "SchemaNotMigrated",
    "SchemaTooNew",
    "SerializationError",
    "Snooze",
    "SyncTransaction",
    "TerminalError",
    "Transaction",
    "UniqueConflict",
    "ValidationError",
    "WaitForCallback",
    "Weighted",
    "WorkerConfig",
    "__version__",
    "derive_kind",
]
