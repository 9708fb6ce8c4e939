"""One attempt: a claimed job's handler run, and everything that belongs to that run.

The user's :class:`~awa.types.Job` is the row as claimed plus the handler's own view
(``progress``, ``metadata``). What exists only while the handler runs lives here: the
fencing key, the permit, the deadline, the cancel state, the progress and metadata still
to write, the callback id. ``job.set_progress(...)`` and friends reach this object
through the job's one private link to it, and the attempt ends by emitting a complete
outcome (:meth:`Attempt.outcome`) that carries its progress and metadata, so nothing
downstream has to look back at the job for them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from awa import validate
from awa.db import sql
from awa.errors import AwaError, BlockingCallOnLoop, WorkerNotRunning
from awa.types import Job
from awa.worker import callback_wait, progress, results
from awa.worker.permits import Permit

R = TypeVar("R")

LEASE_UNCONFIRMED = "lease unconfirmed"
"""Why an attempt is stopped when no heartbeat confirmed its lease for too long."""
# Why a worker's heartbeats may fail to confirm a lease in time: said in the log and in
# the job's error. Not only the database: a handler that blocks the event loop, or
# CPU-bound plain def handlers starving it of the interpreter, delay the beats as much
# (a review: 16 such threads with 1 s beats failed 12 of 16 healthy jobs).
UNCONFIRMED_CAUSES = (
    "the database out of reach or too slow to answer, the row held by another "
    "transaction, or this process's event loop blocked or starved"
)
LOOP_STALLED = (
    "blocked by a handler, or starved by CPU-bound plain def handlers: see README, "
    "Heartbeats and CPU-bound handlers"
)
STOPPED_BY_WORKER = frozenset({"deadline", LEASE_UNCONFIRMED})
"""Stops the worker decides alone, the row still its own: it writes their outcome (every
other stop — a cancel, a lost lease, shutdown — follows a row that moved on already)."""


class AttemptServices:
    """The worker's I/O for attempts: immediate progress writes and callback ids.

    Plain ``def`` handlers run in threads; their ``*_sync`` calls run the I/O on the
    worker's event loop (bound by :meth:`bind` when the worker starts).
    """

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._loop: asyncio.AbstractEventLoop | None = None
        self.waiters = callback_wait.Waiters()  # woken by ``resumed`` notices
        # Tells the executor's deadline watcher about a deadline that runs again.
        self.deadline_noticed: Callable[[float], None] | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Remember the worker's loop (the sync variants run their I/O there)."""
        self._loop = loop

    def on_loop(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the worker's loop from a handler thread and wait for it."""
        if self._loop is None:
            coro.close()
            raise WorkerNotRunning("the worker is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise BlockingCallOnLoop(
                "a *_sync job method was called inside an async handler: await the async one"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def flush(self, attempt: Attempt) -> bool:
        """Write ``attempt``'s progress and metadata now (lease-guarded)."""
        if not attempt.updates.touched:
            return True  # nothing was ever set: nothing to write
        return await progress.write_one(self._pool, attempt)

    async def register_callback(self, attempt: Attempt, timeout_seconds: float) -> str:
        """Store a fresh callback id and timeout on ``attempt``'s row; returns the id."""
        timeout = validate.seconds("timeout_seconds", timeout_seconds)
        callback_id = str(uuid.uuid4())
        job_id, lease, attempted_at = attempt.key
        params = {
            "id": job_id,
            "run_lease": lease,
            "attempted_at": attempted_at,
            "callback_id": callback_id,
            "timeout_ms": int(timeout * 1000),
        }
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.JOB_REGISTER_CALLBACK, params)
            row = await cur.fetchone()
        if row is None:
            raise AwaError(f"job {job_id} is no longer running under this attempt (lease lost)")
        return callback_id

    async def wait_for_callback(self, attempt: Attempt, callback_id: str) -> Any:
        """Wait inside ``attempt`` for ``callback_id``'s resume (see :mod:`.callback_wait`)."""
        return await callback_wait.wait(self._pool, self.waiters, attempt, callback_id)


class Attempt:
    """One running attempt of one job: what ``job.set_progress`` & co. reach."""

    __slots__ = (
        "_services",
        "abandoned",
        "callback_id",
        "callback_wake",
        "cancel_reason",
        "claimed_at",
        "deadline_at",
        "deadline_ms",
        "handler_started",
        "identity",
        "interruptible",
        "job",
        "key",
        "lease_until",
        "permit",
        "started",
        "stop_at",
        "stopped_by_clock",
        "stuck",
        "task",
        "thread",
        "updates",
    )

    def __init__(
        self,
        job: Job[Any],
        permit: Permit,
        deadline_ms: int,
        services: AttemptServices | None,
        claimed_at: float | None = None,
    ) -> None:
        self.job = job
        self.key: results.AttemptKey = results.attempt_key(job)
        # What the outcome and the bookkeeping read off the job, kept apart from the job
        # the handler holds (and may change): restored before the outcome is decided.
        self.identity = (job.kind, job.queue, job.attempt, job.max_attempts)
        self.permit = permit
        self.deadline_ms = deadline_ms
        self.started = time.monotonic()
        # When the claim was sent (monotonic): the oldest this claim can be.
        self.claimed_at = self.started if claimed_at is None else claimed_at
        # The deadline clock (None: no deadline, or paused while waiting for a callback).
        self.deadline_at = self.started + deadline_ms / 1000 if deadline_ms > 0 else None
        # Past this the worker can no longer vouch for the lease (no heartbeat confirmed it
        # since): the job may be rescued soon, so the handler is stopped first. Set by the
        # executor; moved on by each heartbeat that finds the attempt still running.
        self.lease_until: float | None = None
        # Asked to stop: when to give up waiting for the handler (None: never again).
        self.stop_at: float | None = None
        self.interruptible = False  # True while an async handler runs: cancel it to stop it
        self.handler_started = False  # its handler was called (a thread, a coroutine)
        # Set while the handler waits in wait_for_callback: a stop from outside wakes the
        # wait, which reads the row and raises CallbackEnded, instead of cancelling it.
        self.callback_wake: asyncio.Event | None = None
        self.cancel_reason: str | None = None
        # Set by is_cancelled() when the handler read its limit off the clock before the
        # worker's event loop could stop it; the loop does the rest of the stop when it can.
        self.stopped_by_clock = False
        self.abandoned = False  # the worker gave up waiting for its handler (ADR 0016)
        self.stuck = False  # asked to stop, still running, and could not be abandoned
        self.task: asyncio.Task[None] | None = None
        self.thread: Future[Any] | None = None  # a plain def handler's run on its thread
        self.updates = progress.Updates(job)
        self.callback_id: str | None = None
        self._services = services
        job._attempt = self

    @property
    def due(self) -> float | None:
        """When the deadline watcher must next look at this attempt (``time.monotonic()``):
        its deadline or its lease's limit, whichever comes first; once it was asked to stop,
        the time to give up on its handler."""
        if self.cancel_reason is not None:
            return 0.0 if self.stopped_by_clock else self.stop_at
        deadline, lease = self.deadline_at, self.lease_until
        if deadline is None or (lease is not None and lease < deadline):
            return lease
        return deadline

    @property
    def handler_running(self) -> bool:
        """True while the handler has not returned (its task, or its thread, still runs)."""
        if self.thread is not None:
            return not self.thread.done()
        return self.task is not None and not self.task.done()

    def describe(self) -> str:
        """``job 12 (send_email, attempt 2)``, for log lines."""
        return f"job {self.job.id} ({self.job.kind}, attempt {self.job.attempt})"

    @property
    def run_lease(self) -> int:
        """The lease every write of this attempt must match."""
        return self.key[1]

    # -- cancel state ----------------------------------------------------------------

    def is_cancelled(self) -> bool:
        """True once the worker asked this attempt to stop, or once its lease's limit or
        its deadline has passed by the clock. The worker's own stop comes from its event
        loop, which a handler blocking it holds up: a plain def handler asking this ran on
        beside its rescued retry in another process for 11 s (a review). Safe from any
        thread: it only ever sets the reason once."""
        if self.cancel_reason is not None:
            return True
        now = time.monotonic()
        lease, deadline = self.lease_until, self.deadline_at
        if self.handler_started and lease is not None and lease <= now:
            reason = LEASE_UNCONFIRMED
        elif deadline is not None and deadline <= now:
            reason = "deadline"
        else:
            return False
        if self.request_cancel(reason):
            self.stopped_by_clock = True
        return True

    def request_cancel(self, reason: str) -> bool:
        """Record why the attempt must stop; False when it was already asked to."""
        if self.cancel_reason is not None:
            return False
        self.cancel_reason = reason
        return True

    # -- what the handler reaches through its job ------------------------------------

    def _io(self) -> AttemptServices:
        if self._services is None:
            raise WorkerNotRunning(f"job {self.job.id} runs without a worker's services")
        return self._services

    def set_progress(self, percent: float, message: str | None, checkpoint: Any) -> None:
        """See :meth:`awa.Job.set_progress`."""
        self.updates.set_progress(percent, message, checkpoint)

    def update_metadata(self, patch: Mapping[str, Any]) -> None:
        """See :meth:`awa.Job.update_metadata`."""
        self.updates.update_metadata(patch)

    async def flush(self) -> bool:
        """See :meth:`awa.Job.flush_progress`."""
        return await self._io().flush(self)

    def flush_sync(self) -> bool:
        """See :meth:`awa.Job.flush_progress_sync`."""
        io = self._io()
        return io.on_loop(io.flush(self))

    async def register_callback(self, timeout_seconds: float) -> str:
        """See :meth:`awa.Job.register_callback`."""
        self.callback_id = await self._io().register_callback(self, timeout_seconds)
        return self.callback_id

    def register_callback_sync(self, timeout_seconds: float) -> str:
        """See :meth:`awa.Job.register_callback_sync`."""
        io = self._io()
        self.callback_id = io.on_loop(io.register_callback(self, timeout_seconds))
        return self.callback_id

    async def wait_for_callback(self, callback_id: str) -> Any:
        """See :meth:`awa.Job.wait_for_callback`."""
        payload = await self._io().wait_for_callback(self, callback_id)
        self.callback_id = None  # answered: it can no longer park the job
        return payload

    def wait_for_callback_sync(self, callback_id: str) -> Any:
        """See :meth:`awa.Job.wait_for_callback_sync`."""
        io = self._io()
        payload = io.on_loop(io.wait_for_callback(self, callback_id))
        self.callback_id = None
        return payload

    # -- the deadline, paused while the handler waits for a callback ------------------

    def pause_deadline(self) -> float | None:
        """Stop the deadline clock; the seconds that were left (None: no deadline)."""
        if self.deadline_at is None or self.cancel_reason is not None:
            return None
        left, self.deadline_at = max(self.deadline_at - time.monotonic(), 0.0), None
        return left

    def resume_deadline(self, left: float | None) -> None:
        """Run the deadline clock again with ``left`` seconds (None: no deadline)."""
        if left is None or self.cancel_reason is not None:
            return
        self.deadline_at = time.monotonic() + left
        noticed = self._services.deadline_noticed if self._services is not None else None
        if noticed is not None:
            noticed(self.deadline_at)

    # -- the outcome -----------------------------------------------------------------

    def outcome(self, outcome: results.Finalization) -> results.Finalization:
        """``outcome`` completed with what this attempt recorded (progress, metadata)."""
        outcome.progress, outcome.metadata = self.updates.final()
        return outcome

    def returned(self, value: Any) -> results.Finalization:
        """The outcome of a handler that returned ``value``."""
        return self.outcome(results.from_return(self._settled(), value, self.callback_id))

    def raised(self, exc: BaseException) -> results.Finalization:
        """The outcome of a handler that raised ``exc``."""
        return self.outcome(results.from_exception(self._settled(), exc))

    def failed(self, message: str, kind: str, *, terminal: bool) -> results.Finalization:
        """The outcome of a failure the worker detected itself."""
        return self.outcome(results.failure(self._settled(), message, kind, terminal=terminal))

    def cut_short(self, note: str = "") -> results.Finalization:
        """The outcome of an attempt the worker stopped itself (:data:`STOPPED_BY_WORKER`):
        retried with backoff, or failed on its last attempt."""
        if self.cancel_reason == LEASE_UNCONFIRMED:
            message = (
                f"stopped: no heartbeat confirmed its lease in time ({UNCONFIRMED_CAUSES}), "
                f"so the job could have been rescued and run elsewhere{note}"
            )
            return self.failed(message, "LeaseUnconfirmed", terminal=False)
        message = f"deadline of {self.deadline_ms} ms exceeded{note}"
        return self.failed(message, "DeadlineExceeded", terminal=False)

    def _settled(self) -> Job[Any]:
        """The job with the attempt's own identity put back: a handler that set
        ``job.attempt = 0`` retried for ever, ``job.id`` or ``job.run_lease`` wrote its
        outcome to no row and left the job running."""
        job = self.job
        job.id, job.run_lease, job.attempted_at = self.key
        job.kind, job.queue, job.attempt, job.max_attempts = self.identity
        return job
