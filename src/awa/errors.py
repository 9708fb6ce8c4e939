"""Every error awa raises, rooted at :class:`AwaError`.

The tree::

    AwaError
    ├── ValidationError          a value is out of range or of the wrong type (names the field)
    │   └── NoDatabaseUrl        no database URL given, and none in the environment
    ├── SerializationError       job args cannot be encoded as JSON
    ├── UniqueConflict           a unique job already exists in one of the guarded states
    ├── JobNotFound              no job has that id
    ├── ScheduleNotFound         no periodic schedule has that name
    ├── BatchNotFound            no batch operation has that id
    ├── CallbackNotFound         no job waits for that callback id (unknown or resolved)
    ├── CallbackEnded            a handler's wait for its callback ended without a resume
    ├── CallbackTimeout          a handler waited for its callback past its timeout
    ├── InvalidSignature         a signed callback request failed verification
    ├── SchemaNotMigrated        the ``awa`` schema is missing or older than this code
    ├── SchemaTooNew             the database was migrated by a newer awa
    ├── DatabaseError            any other driver error, mapped in ``awa.db.errors``
    ├── MissingExtra             a feature's optional dependency is not installed (names the extra)
    ├── WorkerNotRunning         a worker-only call made where no worker runs it
    ├── ClientClosed             a call on a client after ``close()``
    ├── BlockingCallOnLoop       a blocking call made on the event loop it would wait for
    ├── WrongEventLoop           an AsyncClient used on a second event loop while its first runs
    ├── BuildError               invalid worker configuration, raised by ``start()``
    │   ├── NoQueuesConfigured
    │   ├── NoHandlersRegistered
    │   ├── DuplicateQueue
    │   ├── MinWorkersExceedGlobal
    │   ├── InvalidWeight
    │   ├── InvalidRateLimit
    │   ├── InvalidClaimBatchSize
    │   ├── InvalidWorkers
    │   └── InvalidSetting       any other out-of-range worker setting
    └── TerminalError            raised by a handler: fail the job now, no retry

Handler outcomes that are not failures (``RetryAfter``, ``Snooze``, ``Cancel``) are
values returned from the handler, not exceptions; see :mod:`awa.outcomes`.
"""

from __future__ import annotations


class AwaError(Exception):
    """Root of every error raised by awa."""


class ValidationError(AwaError, ValueError):
    """A value given to awa is invalid. ``field`` names it; the message says the bound."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class NoDatabaseUrl(ValidationError):
    """A client was built with no database URL, and the environment names none
    (``AWA_DATABASE_URL``, ``DATABASE_URL``)."""

    def __init__(self) -> None:
        super().__init__(
            "database_url", "no database URL: pass one, or set AWA_DATABASE_URL or DATABASE_URL"
        )


class SerializationError(AwaError, TypeError):
    """Job args could not be encoded as JSON (or decoded into the registered type)."""


class UniqueConflict(AwaError):
    """A job with the same unique key already exists in one of the guarded states.

    ``existing_id`` is that job's id when the insert could still look it up (not inside
    a transaction the conflict aborted), else None; ``unique_key`` is the key."""

    def __init__(
        self, message: str, *, existing_id: int | None = None, unique_key: bytes | None = None
    ) -> None:
        super().__init__(message)
        self.existing_id = existing_id
        self.unique_key = unique_key

    def held_by(self, job_id: int) -> UniqueConflict:
        """This conflict, naming the job that holds the key."""
        return UniqueConflict(
            f"job {job_id} already holds this unique key in a guarded state "
            f"(awa job explain {job_id})",
            existing_id=job_id,
            unique_key=self.unique_key,
        )


class JobNotFound(AwaError, LookupError):
    """No job has the given id."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class ScheduleNotFound(AwaError, LookupError):
    """No periodic (cron) schedule has the given name."""

    def __init__(self, name: str, hint: str = "see `awa cron list`") -> None:
        super().__init__(f"cron schedule {name!r} not found ({hint})")
        self.name = name


class BatchNotFound(AwaError, LookupError):
    """No batch operation has the given id."""

    def __init__(self, operation_id: int) -> None:
        super().__init__(f"batch operation {operation_id} not found (see `awa batch list`)")
        self.operation_id = operation_id


class CallbackNotFound(AwaError, LookupError):
    """No job waits for the given callback id: it is unknown, timed out or already resolved."""

    def __init__(self, callback_id: object) -> None:
        super().__init__(
            f"no job is waiting for callback {callback_id}: it is unknown, already resolved "
            "or timed out"
        )
        self.callback_id = callback_id


class CallbackEnded(AwaError):
    """Raised inside a handler by ``job.wait_for_callback()`` when the wait ends some other
    way than ``resume_external`` or a timeout: the callback was completed, failed or
    retried from outside, or the job was cancelled or rescued. ``state`` is the job's state
    then (None when the row is gone, e.g. moved to the dead letter queue). The attempt is
    over: whatever the handler does next is not written."""

    def __init__(self, job_id: int, state: object) -> None:
        super().__init__(
            f"job {job_id} stopped waiting for its callback without a resume "
            f"(state now {state}); this attempt is over"
        )
        self.job_id = job_id
        self.state = state


class CallbackTimeout(AwaError):
    """Raised inside a handler by ``job.wait_for_callback()`` when the callback's timeout
    (``register_callback(timeout_seconds=...)``, pushed back by ``heartbeat_callback``)
    passes without an answer. Like any error a handler raises, it retries the job (or
    fails it on its last attempt) unless the handler catches it."""

    def __init__(self, job_id: int, callback_id: str) -> None:
        super().__init__(f"callback {callback_id} of job {job_id} timed out")
        self.job_id = job_id
        self.callback_id = callback_id


class InvalidSignature(AwaError):
    """A signed callback request is missing its signature, or it does not verify (wrong
    secret, tampered body, other callback or action, timestamp out of the window)."""


class SchemaNotMigrated(AwaError):
    """The ``awa`` schema is missing or behind this code: run ``awa migrate``."""


class SchemaTooNew(AwaError):
    """The database schema was migrated by a newer version of awa than this one."""


class DatabaseError(AwaError):
    """A database error that has no more specific meaning to awa."""


class MissingExtra(AwaError, ImportError):
    """A feature needs an optional dependency: ``pip install 'awa[<extra>]'`` adds it."""

    def __init__(self, extra: str, feature: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the {extra} extra: pip install 'awa[{extra}]' "
            f"(module {module} is not installed)"
        )
        self.extra = extra
        self.feature = feature
        self.module = module


class WorkerNotRunning(AwaError, RuntimeError):
    """A call that needs a running worker was made without one (e.g. ``job.set_progress``
    outside a handler, or a ``*_sync`` job method from inside an async handler)."""


class ClientClosed(AwaError, RuntimeError):
    """The client was closed: create a new one."""


class TransactionEnded(AwaError, RuntimeError):
    """A :class:`~awa.client.transaction.Transaction` was used after its block ended: its
    connection went back to the pool, where another caller's transaction may hold it
    now. Open a new ``client.transaction()``."""

    def __init__(self) -> None:
        super().__init__(
            "this transaction has ended (its `async with` / `with` block exited): open a "
            "new client.transaction()"
        )


class BlockingCallOnLoop(AwaError, RuntimeError):
    """A blocking call was made on the very event loop it would have to wait for (it
    could only deadlock): use the async method there, e.g. ``await job.flush_progress()``
    instead of ``job.flush_progress_sync()`` inside an ``async def`` handler."""


class WrongEventLoop(AwaError, RuntimeError):
    """An :class:`~awa.AsyncClient` was used on an event loop other than the one its
    connection pool runs on, while that one is not closed (the pool's background tasks live
    there). Use one client per event loop, or the blocking :class:`~awa.Client` from other
    threads; with pytest-asyncio, a client fixture needs the ``loop_scope`` of its tests.
    (After the first loop has closed — ``asyncio.run`` called again — the client opens a
    new pool on the new loop by itself.)"""


class BuildError(AwaError, ValueError):
    """Invalid worker configuration, detected by ``start()`` before anything runs."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class NoQueuesConfigured(BuildError):
    """``start()`` was given no queues and no task names one."""

    def __init__(self) -> None:
        super().__init__("queues", "no queues configured; pass at least one queue to start()")


class NoHandlersRegistered(BuildError):
    """``start()`` was called before any handler was registered.

    A worker without handlers could only hand every job it claims back; this usually
    means the module defining the tasks was never imported.
    """

    def __init__(self) -> None:
        super().__init__(
            "tasks",
            "no handler is registered: register tasks with @client.task before start() "
            "(is the module that defines them imported?)",
        )


class DuplicateQueue(BuildError):
    """The same queue name appears twice in the configuration."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"queues[{queue!r}]", "configured more than once")
        self.queue = queue


class MinWorkersExceedGlobal(BuildError):
    """Σ min_workers is larger than global_max_workers."""

    def __init__(self, total_min: int, global_max: int, limit: str = "global_max_workers") -> None:
        super().__init__(
            "min_workers", f"sum of min_workers ({total_min}) exceeds {limit} ({global_max})"
        )
        self.total_min = total_min
        self.global_max = global_max


class InvalidWeight(BuildError):
    """A queue's weight is not an integer from 1 to 2 147 483 647."""

    def __init__(self, queue: str, weight: object) -> None:
        super().__init__(
            f"queues[{queue!r}].weight", f"must be an integer from 1 to 2147483647, got {weight!r}"
        )
        self.queue = queue


class InvalidRateLimit(BuildError):
    """A queue's rate limit has max_rate <= 0 or a negative burst."""

    def __init__(self, queue: str, message: str) -> None:
        super().__init__(f"queues[{queue!r}].rate_limit", message)
        self.queue = queue


class InvalidClaimBatchSize(BuildError):
    """A queue's claim_batch_size is not an integer from 1 to 2 147 483 647."""

    def __init__(self, queue: str, value: object) -> None:
        super().__init__(
            f"queues[{queue!r}].claim_batch_size",
            f"must be an integer from 1 to 2147483647, got {value!r}",
        )
        self.queue = queue


class InvalidWorkers(BuildError):
    """A worker count is negative, or zero where a positive one is needed."""


class InvalidSetting(BuildError):
    """Any other worker setting out of its range."""


class TerminalError(AwaError):
    """Raise from a handler to fail the job at once, without further attempts."""
