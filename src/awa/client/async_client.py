"""The async core client: producing, administering and running jobs.

Everything else (the sync :class:`~awa.client.sync_client.Client`, the CLI, the dashboard)
goes through this class, so the behaviour lives in one place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Self, TypeVar, Unpack

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus

from awa import tracing, validate
from awa.client import admin, insert_items
from awa.client import explain as explain_path
from awa.client import insert as insert_path
from awa.client.batch_methods import BatchMethods
from awa.client.fleet_control import FleetControl
from awa.client.job_lifecycle import JobLifecycle
from awa.client.registering import Registering
from awa.client.seat_outlook import SeatOutlook
from awa.client.transaction import Transaction
from awa.client.unique import UniqueOpts
from awa.config import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    MAX_CONNECTIONS,
    QueueSpec,
    StartSettings,
    WorkerConfig,
    build_worker_config,
    database_url_source,
    resolve_database_url,
)
from awa.db import connection, forking, migrations
from awa.db.errors import mapped, translate
from awa.db.lane import ConnectionLane
from awa.db.pool import Pool, writes_refused
from awa.errors import (
    ClientClosed,
    DatabaseError,
    NoDatabaseUrl,
    NoHandlersRegistered,
    ValidationError,
    WrongEventLoop,
)
from awa.hooks import Hooks
from awa.periodic import PeriodicJob
from awa.types import (
    Explanation,
    HealthCheck,
    Job,
    JobState,
    JobSummary,
    QueueStat,
    RuntimeInstance,
    RuntimeOverrides,
    RuntimeSnapshot,
    StoredJob,
)
from awa.worker.observe import Observer
from awa.worker.registry import TaskRegistry

logger = logging.getLogger("awa")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
_UNSET: Any = object()


DEFAULT_POOL_TIMEOUT_S = 30.0


class AsyncClient(Registering, JobLifecycle, FleetControl, BatchMethods):
    """Connects to PostgreSQL; inserts, inspects and runs jobs.

    Use as an async context manager (or call :meth:`close`). The connection pool opens
    on first use. ``database_url`` falls back to ``AWA_DATABASE_URL`` then ``DATABASE_URL``.

    ``max_connections`` bounds the pool (a call waits at most ``pool_timeout_s``, 30 s
    unless set before first use, for a pooled connection, then raises DatabaseError); a
    running worker holds at most two more, for
    LISTEN and the maintenance leader, on ``listen_url`` (else ``AWA_LISTEN_URL``, else
    ``database_url``). Give ``listen_url`` a direct connection when ``database_url`` goes
    through PgBouncer in transaction mode (docs/scaling.md).
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        max_connections: int = 10,
        listen_url: str | None = None,
    ) -> None:
        url = resolve_database_url(database_url)
        if url is None:
            raise NoDatabaseUrl()
        # A malformed URL is named by where it came from: the argument, or the variable
        self.database_url = connection.check_url(url, database_url_source(database_url))
        if listen_url is None:
            listen_url = os.environ.get("AWA_LISTEN_URL") or None
        self.listen_url = (
            None if listen_url is None else connection.check_url(listen_url, "listen_url")
        )
        self.max_connections = validate.integer(
            "max_connections", max_connections, low=1, high=MAX_CONNECTIONS
        )
        self.pool_timeout_s = DEFAULT_POOL_TIMEOUT_S
        self.registry = TaskRegistry()
        self._pool: Pool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None  # where the pool's tasks run
        self._closed = False
        self._pool_lock = asyncio.Lock()
        self._loop_claim = threading.Lock()  # see _check_loop
        self._insert_lane = ConnectionLane()
        self._seat_outlook = SeatOutlook()  # single inserts: look for idle workers' seats?
        self._worker: Any = None  # awa.worker.runtime.Worker once started
        self._observers: list[Observer] = []
        self._periodic: list[PeriodicJob] = []  # client.periodic(...), see JobLifecycle
        self._hooks: Hooks | None = None  # client.on_event(...)
        self._after_insert: Callable[[Job[Any]], Awaitable[Job[Any]]] | None = None  # testing
        self._starting = False  # a start() is under way (several threads may call it)
        self._stopped = _set(asyncio.Event())  # cleared for each worker started (wait_stopped)
        self._wrong_loop_advice = (  # what a call from a second event loop is told
            "this AsyncClient's pool runs on another event loop, not closed yet: use one "
            "client per event loop (with pytest-asyncio, give a client fixture the "
            "loop_scope of the tests using it), or awa.Client from other threads"
        )
        forking.reset_in_child(self)

    def _forget_parent(self) -> None:
        """In a forked child: the pool, its held connections and any worker were the
        parent's (see :mod:`awa.db.forking`); this process opens its own on first use."""
        self._loop_claim = threading.Lock()  # a parent's thread may have held it at the fork
        self._forget_pool()

    def _forget_pool(self) -> None:
        """Drop the pool and what runs on its loop (a fork's parent's, or a closed loop's:
        nothing of it can run again)."""
        if self._pool_loop is not None:
            # Its pending tasks (the pool's workers, say) are collected unfinished, each
            # logged "Task was destroyed but it is pending!": in every forked child on its
            # first call (a review), and nothing is lost.
            for task in asyncio.all_tasks(self._pool_loop):
                task._log_destroy_pending = False  # type: ignore[attr-defined]
        self._pool = None
        self._pool_loop = None
        self._pool_lock = asyncio.Lock()
        self._insert_lane = ConnectionLane()
        self._seat_outlook = SeatOutlook()
        self._worker = None
        self._starting = False
        self._stopped = _set(asyncio.Event())

    # -- lifecycle -------------------------------------------------------------------

    def _check_loop(self) -> None:
        """Refuse a closed client; follow a module-level client from one ``asyncio.run``
        to the next. A pool's background tasks (connecting, growing) run on the loop that
        opened it: on another loop a call needing a new connection waited 30 s for one
        that never came (a review).

        The running loop claims the client here, before anything awaits, under a thread
        lock: threads each running a loop of their own (``asyncio.run`` per request) call
        at once, and one that passed the check while no loop owned the client went on to
        wait on another loop's lock or pool, for ever (a review)."""
        running = asyncio.get_running_loop()
        with self._loop_claim:
            if self._closed:
                raise ClientClosed("this client is closed")
            self._leave_a_closed_loop()
            if self._pool_loop is None:
                self._pool_loop = running
            elif self._pool_loop is not running:
                raise WrongEventLoop(self._wrong_loop_advice)

    def _leave_a_closed_loop(self) -> None:
        """Nothing of a pool whose event loop has closed can run again: forget it (its
        connections close as it is collected); the next use opens one on its own loop."""
        if self._pool_loop is not None and self._pool_loop.is_closed():
            logger.info("the event loop of this client's pool has closed: dropping the pool")
            if self._pool is not None:
                self._insert_lane.close_stranded()
                self._pool.close_stranded()
            self._forget_pool()

    async def _get_pool(self) -> Pool:
        self._check_loop()
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    pool = Pool(
                        self.database_url,
                        min_size=1,
                        max_size=self.max_connections,
                        connection_class=connection.Connection,
                        kwargs={"autocommit": True, **connection.keepalives(self.database_url)},
                        configure=connection.configure,
                        open=False,
                        name="awa",
                        timeout=self.pool_timeout_s,
                    )
                    try:
                        await connection.probe(self.database_url)  # fail fast, with the reason
                        with mapped():
                            await pool.open(wait=True, timeout=30)
                    except BaseException:
                        # A call cancelled while the pool opened left its workers running,
                        # each then "destroyed but pending" (a review): closed here.
                        await asyncio.shield(pool.close())
                        raise
                    self._pool = pool
        return self._pool

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection; failing to get one (pool timeout) is a DatabaseError."""
        pool = await self._get_pool()
        with mapped():
            async with pool.connection() as conn:
                yield conn

    async def _read(self, op: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        """Run the read-only ``op``; if its connection dies under it (a restart, a
        failover), run it again on another connection: reading twice changes nothing.
        Writes are not retried — whether a statement ran before its connection died is
        unknowable (connections already dead are never lent: see awa.db.pool).

        A server shutting down ends its connections one by one, so the next pooled one
        may die under the read too: each failure discards one, and with every pooled
        connection tried the pool connects afresh (waiting for the server to be back)."""
        pool = await self._get_pool()
        with mapped():
            for _ in range(self.max_connections):  # then once more, on a fresh connection
                async with pool.connection() as conn:
                    try:
                        return await op(conn)
                    except Exception:
                        if not conn.broken:
                            raise
                logger.info("a read lost its connection; reading again on another")
            async with pool.connection() as conn:
                return await op(conn)

    async def close(self) -> None:
        """Stop the worker if running, then close the pool. Idempotent; any later call
        raises :class:`~awa.ClientClosed`."""
        if self._closed:
            return
        self._leave_a_closed_loop()
        if self._worker is not None:
            await self.shutdown()
        self._closed = True
        if self._pool is not None:
            await self._insert_lane.close(self._pool)
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> Self:
        await self._get_pool()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- schema ----------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply pending schema migrations; returns the versions applied."""
        async with self._connection() as conn:
            with mapped():
                return await migrations.migrate(conn)

    async def migration_sql(self) -> str:
        """The SQL ``migrate()`` would run now — the pending migrations, in one
        transaction under its lock — for review or to apply by hand; SchemaTooNew when
        the schema is newer than this code."""
        return await self._read(migrations.pending_sql)

    async def check_schema(self) -> None:
        """Raise SchemaNotMigrated/SchemaTooNew unless the schema matches this code."""
        await self._read(migrations.check_schema)

    # -- producing -------------------------------------------------------------------

    def _spec(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = _UNSET,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        run_at: datetime | None = None,
        unique_opts: Mapping[str, Any] | UniqueOpts | None = None,
        ordering_key: str | None = None,
    ) -> insert_path.InsertSpec:
        kind, queue = self.registry.job_defaults(args, kind, None if queue is _UNSET else queue)
        return insert_path.build_spec(
            args,
            kind=kind,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            tags=tags,
            metadata=metadata,
            run_at=run_at,
            unique_opts=unique_opts,
            ordering_key=ordering_key,
        )

    def _default_queue(self, args_type: type[Any], kind: str | None) -> str:
        """The queue of the task registered for the args type, else for the kind (dict
        args name their kind), else ``default``."""
        return self.registry.default_queue(args_type, kind) or DEFAULT_QUEUE

    def _specs(self, args_list: Iterable[Any], **options: Any) -> list[insert_path.InsertSpec]:
        return insert_items.build_specs(
            args_list,
            default_queue=self._default_queue,
            default_kind=self.registry.default_kind,
            **options,
        )

    async def insert(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        run_at: datetime | None = None,
        unique_opts: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
    ) -> StoredJob:
        """Insert one job. ``queue`` defaults to the queue its task was registered on, else
        ``"default"``. Jobs sharing an ``ordering_key`` run one at a time in insertion
        order, across queues and processes (ADR 0034). Raises ValidationError,
        SerializationError or UniqueConflict."""
        spec = self._spec(
            args,
            kind=kind,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            tags=tags,
            metadata=metadata,
            run_at=run_at,
            unique_opts=unique_opts,
            ordering_key=ordering_key,
        )
        pool = await self._get_pool()
        with mapped():
            async with self._insert_lane.connection(pool) as conn:
                job = await insert_path.insert_direct(conn, spec, self._seat_outlook)
        if self._after_insert is not None:  # awa.testing.inline
            job = await self._after_insert(job)
        return job

    async def insert_many(
        self,
        args_list: Iterable[Any],
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        run_at: datetime | None = None,
        unique_opts: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
    ) -> list[StoredJob]:
        """Insert many jobs in one transaction through COPY; all or nothing.

        The options apply to every job; an ``awa.InsertItem(args, queue=..., priority=...,
        run_at=..., unique_opts=..., ordering_key=..., ...)`` in the list overrides them for
        that job.
        A unique conflict of any job raises UniqueConflict and writes none."""
        specs = self._specs(
            args_list,
            kind=kind,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            tags=tags,
            metadata=metadata,
            run_at=run_at,
            unique_opts=unique_opts,
            ordering_key=ordering_key,
        )
        async with self._connection() as conn:
            jobs = await insert_path.insert_many(conn, specs)
        if self._after_insert is not None:  # awa.testing.inline
            jobs = [await self._after_insert(job) for job in jobs]
        return jobs

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A transaction for the application's SQL and job inserts; commits on success."""
        pool = await self._get_pool()
        with mapped():  # no connection in time: DatabaseError, as for every call
            conn = await pool.getconn()
        try:
            async with conn.transaction():
                tx = Transaction(conn, self._spec, self._specs)
                try:
                    yield tx
                finally:  # calls still in flight (gathered) end before COMMIT or ROLLBACK
                    await tx._end()
                if conn.info.transaction_status == TransactionStatus.INERROR:
                    # A statement failed and the block caught its error: COMMIT would
                    # quietly roll everything back, the block's other work included.
                    raise DatabaseError(
                        "the transaction was rolled back: a statement inside it failed and "
                        "its error was caught in the block, so nothing of it was committed"
                    )
        except psycopg.OperationalError as exc:
            # The connection died (a restart, a failover): a DatabaseError like every
            # call's. The application's own SQL errors reach it unchanged.
            if conn.broken or conn.closed:
                raise translate(exc) from exc
            raise
        except Exception as exc:
            if writes_refused(exc):  # its session stays read-only: closed, replaced
                await conn.close()
            raise
        finally:
            await pool.putconn(conn)  # a broken one is closed and replaced

    # -- admin -----------------------------------------------------------------------

    async def get_job(self, job_id: int) -> StoredJob:
        """The job with ``job_id``; JobNotFound when there is none."""
        return await self._read(lambda conn: admin.get_job(conn, job_id))

    async def list_jobs(
        self,
        *,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[StoredJob]:
        """Jobs newest first, filtered; ``limit`` up to 10 000."""
        return await self._read(
            lambda conn: admin.list_jobs(conn, state=state, kind=kind, queue=queue, limit=limit)
        )

    async def list_job_summaries(
        self,
        *,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobSummary]:
        """:meth:`list_jobs` without args, metadata, progress and all errors but the last
        one's message: a listing's cost does not grow with the jobs' payloads."""
        return await self._read(
            lambda conn: admin.list_job_summaries(
                conn, state=state, kind=kind, queue=queue, limit=limit
            )
        )

    async def cancel(self, job_id: int) -> StoredJob:
        """Cancel a job that has not finished; returns it as it now is."""
        async with self._connection() as conn:
            return await admin.cancel(conn, job_id)

    async def retry(self, job_id: int) -> StoredJob:
        """Make a finished, scheduled, retryable or callback-waiting job available now
        (a waiting job's callback id stops resolving); returns the job as it now is. A
        running or available job is returned unchanged."""
        async with self._connection() as conn:
            return await admin.retry(conn, job_id)

    async def cancel_by_unique_key(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = None,
        unique_opts: Mapping[str, Any] | None = None,
    ) -> StoredJob | None:
        """Cancel the unfinished job holding the unique key these arguments produce
        (``queue`` defaults as ``insert``'s does, so ``by_queue`` keys match)."""
        kind, queue = self.registry.job_defaults(args, kind, queue)
        async with self._connection() as conn:
            return await admin.cancel_by_unique_key(
                conn, args, kind=kind, queue=queue, unique_opts=unique_opts
            )

    async def retry_failed(
        self, *, kind: str | None = None, queue: str | None = None
    ) -> list[StoredJob]:
        """Retry every failed job of a kind and/or a queue."""
        async with self._connection() as conn:
            return await admin.retry_failed(conn, kind=kind, queue=queue)

    async def _retry_failed_count(
        self, *, kind: str | None = None, queue: str | None = None
    ) -> int:
        """:meth:`retry_failed`, returning how many (for the CLI and the dashboard, which
        show a count: 500 000 jobs built for one took 1.4 GB, a review)."""
        async with self._connection() as conn:
            return await admin.retry_failed_count(conn, kind=kind, queue=queue)

    async def discard_failed(self, kind: str) -> int:
        """Delete the failed jobs of ``kind``; returns how many."""
        async with self._connection() as conn:
            return await admin.discard_failed(conn, kind)

    async def pause_queue(self, queue: str, paused_by: str | None = None) -> None:
        """Stop all workers claiming from ``queue``; running jobs finish."""
        async with self._connection() as conn:
            await admin.pause_queue(conn, queue, paused_by)

    async def resume_queue(self, queue: str) -> None:
        """Resume claiming from ``queue``."""
        async with self._connection() as conn:
            await admin.resume_queue(conn, queue)

    async def drain_queue(self, queue: str) -> int:
        """Cancel every waiting job of ``queue``; returns how many. (To *run* a queue's
        jobs in a test, see ``awa.testing.drain_queue``.)"""
        async with self._connection() as conn:
            return await admin.drain_queue(conn, queue)

    async def queue_stats(self) -> list[QueueStat]:
        """Per-queue counts, lag and pause state."""
        return await self._read(admin.queue_stats)

    async def explain(self, job_id: int) -> Explanation:
        """Why job ``job_id`` is not running — or where it runs, or how it ended.

        Its reasons come most decisive first, each computed from what the database and
        the live workers' published snapshots say; ``summary`` is one sentence. Two reads,
        no pass over the jobs table (bounded index ranges). JobNotFound for an unknown id.
        """
        return await self._read(lambda conn: explain_path.explain(conn, job_id))

    async def explain_queue(self, queue: str) -> Explanation | None:
        """:meth:`explain` for ``queue``'s available job that has waited longest (None when
        no job of the queue is available)."""

        async def oldest(conn: AsyncConnection[Any]) -> Explanation | None:
            job_id = await explain_path.oldest_available(conn, queue)
            return None if job_id is None else await explain_path.explain(conn, job_id)

        return await self._read(oldest)

    # -- control plane (design record 038) and the fleet ------------------------------

    async def set_runtime_overrides(
        self,
        queue: str,
        *,
        poll_interval_ms: int | None = None,
        claim_batch_size: int | None = None,
        rate_limit: float | None = None,
        deadline_ms: int | None = None,
        max_workers: int | None = None,
        min_workers: int | None = None,
        weight: int | None = None,
    ) -> RuntimeOverrides:
        """Replace ``queue``'s runtime overrides (whole state: None reverts that setting).

        Live workers apply them within one refresh cadence (at once when the notice
        reaches them). ``max_workers`` (hard-reserved mode), ``min_workers`` and ``weight``
        (weighted mode) change each process's permits live: growing applies at the next
        poll; shrinking interrupts nothing — new claims wait until fewer run. Invalid
        values raise ValidationError and write nothing.
        """
        async with self._connection() as conn:
            return await admin.set_runtime_overrides(
                conn,
                queue,
                poll_interval_ms=poll_interval_ms,
                claim_batch_size=claim_batch_size,
                rate_limit=rate_limit,
                deadline_ms=deadline_ms,
                max_workers=max_workers,
                min_workers=min_workers,
                weight=weight,
            )

    async def clear_runtime_overrides(self, queue: str) -> RuntimeOverrides:
        """Remove every override of ``queue``: workers go back to their start values."""
        return await self.set_runtime_overrides(queue)

    async def queue_runtime_overrides(self, queue: str) -> RuntimeOverrides | None:
        """The overrides stored for ``queue`` (None when it has no control row)."""
        return await self._read(lambda conn: admin.queue_runtime_overrides(conn, queue))

    async def list_runtime_instances(self, *, fresh_ms: int = 60_000) -> list[RuntimeInstance]:
        """Live workers (seen within ``fresh_ms``) and their published snapshots."""
        return await self._read(lambda conn: admin.list_runtime_instances(conn, fresh_ms=fresh_ms))

    # -- running ---------------------------------------------------------------------

    def _registrar(self) -> AsyncClient:
        return self

    async def start(
        self,
        /,
        queues: Iterable[QueueSpec] | None = None,
        *,
        global_max_workers: int | None = None,
        **settings: Unpack[StartSettings],
    ) -> None:
        """Start a worker in this event loop; returns once it runs.

        ``queues`` takes ``(name, max_workers)`` tuples, dicts or :class:`QueueConfig`s;
        when omitted, the queues named by registered tasks run with default settings.
        Invalid configuration raises a BuildError naming the field before anything starts.
        """
        if self._worker is not None or self._starting:
            raise ValidationError("start", "this client already runs a worker")
        if queues is None:
            queues = self.registry.queues()
        config = build_worker_config(queues, global_max_workers=global_max_workers, **settings)
        self._check_tasks([q.name for q in config.queues])
        self._starting = True  # from here on it awaits: a second start() must see it
        try:
            await self._start(config)
        finally:
            self._starting = False

    async def _start(self, config: WorkerConfig) -> None:
        from awa.worker.runtime import Worker  # the worker is loaded only by processes that run one

        pool = await self._get_pool()
        if self.listen_url is not None:  # LISTEN and the leader: retried for ever once started
            await connection.probe(self.listen_url, "listen_url (LISTEN and the leader)")
        observers = [*self._observers, *tracing.automatic(self._observers)]
        worker = Worker(
            pool,
            self.database_url,
            self.registry,
            config,
            observers,
            self._periodic,
            listen_url=self.listen_url,
        )
        await worker.start()
        self._worker = worker
        self._stopped = asyncio.Event()

    def _check_tasks(self, queues: list[str]) -> None:
        """No handler at all is an error; a task on a queue not served here, a warning."""
        if not len(self.registry):
            raise NoHandlersRegistered()
        unserved = self.registry.unserved(queues)
        if unserved:
            listed = ", ".join(f"{task.kind} (queue {task.queue!r})" for task in unserved)
            logger.warning(
                "this worker does not serve the queue of task(s) %s: their jobs wait for "
                "another process (check the queue names given to start(): %s)",
                listed, ", ".join(map(repr, queues)),
                extra={"event": "tasks_unserved", "kinds": [t.kind for t in unserved]},
            )  # fmt: skip

    def add_observer(self, observer: Observer) -> None:
        """Subscribe an observer (metrics, hooks) to the worker this client starts next;
        refused while a worker runs (it would never see the observer)."""
        self._before_start("add_observer")
        self._observers.append(observer)

    async def shutdown(self, timeout_ms: int = 5_000) -> None:
        """Stop claiming, let in-flight jobs finish within ``timeout_ms``, return the rest
        (retryable; an attempt counts, so a job on its last one fails: docs/job-states.md)."""
        validate.integer("timeout_ms", timeout_ms, low=0)
        worker, self._worker = self._worker, None
        try:
            if worker is not None:
                await worker.shutdown(timeout_ms)
            if self._hooks is not None:  # let async lifecycle hooks of the last jobs finish
                await self._hooks.wait_idle(timeout_ms / 1000)
        finally:
            if worker is not None:
                self._stopped.set()

    async def wait_stopped(self) -> None:
        """Return once the worker this client started has stopped — by :meth:`shutdown`
        or :meth:`close`, from whichever task called it (a handler, say); at once when no
        worker was started. A program that starts a worker and then waits for it."""
        await self._stopped.wait()

    async def health_check(self) -> HealthCheck:
        """Liveness of the database, the worker loops and each queue's capacity."""
        from awa.worker.health import health_check

        worker = self._worker
        try:
            pool = await self._get_pool()
        except DatabaseError:  # unreachable when the pool opens: a health to report
            pool = None
        return await health_check(pool, worker.snapshot() if worker is not None else None)

    def runtime_snapshot(self) -> RuntimeSnapshot:
        """The running worker's configured, overridden and effective values per queue."""
        if self._worker is None:
            raise ValidationError("runtime_snapshot", "no worker is running in this client")
        snapshot: RuntimeSnapshot = self._worker.snapshot()
        return snapshot


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event
