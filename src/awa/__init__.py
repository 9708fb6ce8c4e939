"""awa — a Postgres-native background job queue.

Produce jobs with :class:`AsyncClient` (or its blocking twin :class:`Client`), register
handlers with ``@client.task``, run them with ``client.start()``. See README.md.
"""

from awa.client.async_client import AsyncClient
from awa.client.sync_client import Client, SyncTransaction
from awa.client.transaction import Transaction
from awa.config import QueueConfig, WorkerConfig
from awa.errors import (
    AwaError,
    BuildError,
    DatabaseError,
    DuplicateQueue,
    InvalidClaimBatchSize,
    InvalidRateLimit,
    InvalidSetting,
    InvalidWeight,
    InvalidWorkers,
    JobNotFound,
    MinWorkersExceedGlobal,
    NoQueuesConfigured,
    SchemaNotMigrated,
    SchemaTooNew,
    SerializationError,
    TerminalError,
    UniqueConflict,
    ValidationError,
)
from awa.kinds import derive_kind
from awa.outcomes import Cancel, RetryAfter, Snooze
from awa.types import (
    HardReserved,
    HealthCheck,
    Job,
    JobState,
    QueueHealth,
    QueueRuntime,
    QueueStat,
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
    "Cancel",
    "Client",
    "DatabaseError",
    "DuplicateQueue",
    "HardReserved",
    "HealthCheck",
    "InvalidClaimBatchSize",
    "InvalidRateLimit",
    "InvalidSetting",
    "InvalidWeight",
    "InvalidWorkers",
    "Job",
    "JobNotFound",
    "JobState",
    "MinWorkersExceedGlobal",
    "NoQueuesConfigured",
    "QueueConfig",
    "QueueHealth",
    "QueueRuntime",
    "QueueStat",
    "RetryAfter",
    "RuntimeInstance",
    "RuntimeOverrides",
    "RuntimeSnapshot",
    "SchemaNotMigrated",
    "SchemaTooNew",
    "SerializationError",
    "Snooze",
    "SyncTransaction",
    "TerminalError",
    "Transaction",
    "UniqueConflict",
    "ValidationError",
    "Weighted",
    "WorkerConfig",
    "__version__",
    "derive_kind",
]
