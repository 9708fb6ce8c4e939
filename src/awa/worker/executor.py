"""Running handlers: one task per claimed job, holding that job's permit throughout.

Async handlers run on the event loop under the attempt's deadline; plain functions run
on handler threads bounded by the same permits. Whatever the handler does — return, raise,
get cancelled, crash its thread — the outcome is classified, handed to the completer and
the permit is released exactly once. A handler asked to stop (deadline, cancel, lost
lease) that is still running ``ABANDON_AFTER_S`` later is abandoned (:mod:`.abandon`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from awa.errors import SerializationError
from awa.serialization import decode_args
from awa.types import Job
from awa.worker import results
from awa.worker.abandon import ABANDON_AFTER_S, Abandoned
from awa.worker.attempt import (
    LEASE_UNCONFIRMED,
    LOOP_STALLED,
    STOPPED_BY_WORKER,
    UNCONFIRMED_CAUSES,
    Attempt,
    AttemptServices,
)
from awa.worker.completer import Completer
from awa.worker.deadlines import Deadlined, DeadlineWatch
from awa.worker.joblog import job_fields
from awa.worker.observe import Observer
from awa.worker.permits import Permit
from awa.worker.registry import Task, TaskRegistry
from awa.worker.threads import HandlerThreads

logger = logging.getLogger("awa")


class Executor:
    """Starts handlers for claimed jobs and tracks the attempts in flight."""

    def __init__(
        self,
        registry: TaskRegistry,
        completer: Completer,
        threads: int,
        observer: Observer | None = None,
    ) -> None:
        self._registry = registry
        self._completer = completer
        self._observer = observer or Observer()
        self._threads = HandlerThreads(threads)
        self.abandoned = Abandoned(self._threads, completer, limit=threads)
        self.attempts: dict[int, Attempt] = {}
        # Attempts whose job was claimed again (rescued or retried, then claimed by this
        # worker) while their handler still ran: no longer in ``attempts``, still holding
        # a permit until they end or are abandoned.
        self.superseded: dict[results.AttemptKey, Attempt] = {}
        self.deadlines = DeadlineWatch(self._watched, self._expire)
        self.started = 0
        self.finished = 0
        # Immediate progress writes and callback ids for handlers (set by the worker).
        self.services: AttemptServices | None = None
        # Set by the worker: a claim older than revalidate_after_s when its handler is
        # about to start is first checked against the database (see _may_start).
        self.revalidate: Callable[[list[results.AttemptKey]], Awaitable[set[int]]] | None = None
        self.revalidate_after_s = math.inf
        # Set by the worker: how long a handler may run with no heartbeat confirming its
        # lease before it is stopped (see heartbeat.unconfirmed_limit_s).
        self.lease_limit_s = math.inf

    def launch(
        self, job: Job[Any], permit: Permit, deadline_ms: int, claimed_at: float | None = None
    ) -> None:
        """Run ``job``'s handler in a new task that owns ``permit`` (``claimed_at``: the
        ``time.monotonic()`` at which its claim was sent)."""
        attempt = Attempt(job, permit, deadline_ms, self.services, claimed_at)
        if self.lease_limit_s != math.inf:
            attempt.lease_until = attempt.claimed_at + self.lease_limit_s
        earlier = self.attempts.get(job.id)
        if earlier is not None:
            self._supersede(earlier)
        self.attempts[job.id] = attempt
        self.started += 1
        attempt.task = asyncio.create_task(self._run(attempt))
        due = attempt.due
        if due is not None:
            self.deadlines.noticed(due)

    def _supersede(self, earlier: Attempt) -> None:
        """``earlier``'s job was just claimed again, so its lease is gone: it is stopped as
        a lost lease is, and abandoned ``ABANDON_AFTER_S`` later if it still runs —
        tracked apart, since the new attempt takes its place under the job's id."""
        self.superseded[earlier.key] = earlier
        if earlier.request_cancel("lease lost"):
            _interrupt(earlier)
            self._stop_requested(earlier)
        elif earlier.stop_at is not None:
            self.deadlines.noticed(earlier.stop_at)

    def _watched(self) -> list[Attempt]:
        """Every attempt the deadline watcher looks after: current and superseded."""
        return [*self.attempts.values(), *self.superseded.values()]

    def _forget(self, attempt: Attempt) -> None:
        """Drop ``attempt`` from the attempts in flight (only its own entry: the job's id
        may belong to a newer attempt by now)."""
        job_id = attempt.key[0]  # not attempt.job.id: the handler may have changed it
        if self.attempts.get(job_id) is attempt:
            del self.attempts[job_id]
        elif self.superseded.get(attempt.key) is attempt:
            del self.superseded[attempt.key]

    def resize(self, threads: int, *, abandon_limit: int) -> None:
        """Live concurrency: as many handler threads as permits (at least), and as many
        handlers abandoned at a time."""
        self._threads.resize(threads)
        self.abandoned.limit = abandon_limit

    def start(self) -> None:
        """Start the deadline watcher. Idempotent."""
        self.deadlines.start()

    async def stop(self) -> None:
        """Stop the deadline watcher. Idempotent."""
        await self.deadlines.stop()

    async def _run(self, attempt: Attempt) -> None:
        job = attempt.job
        try:
            outcome = await self._execute(attempt)
            if attempt.abandoned:  # its outcome (if any) was written when it was given up on
                self.abandoned.ended(attempt)
                outcome = None
            if outcome is None and attempt.cancel_reason is not None:
                self._observer.attempt_stopped(job, attempt.cancel_reason)  # before finished
            if outcome is None or not outcome.handed_back:
                self._observer.job_finished(job, outcome, time.monotonic() - attempt.started)
            if outcome is not None:
                await self._completer.submit(outcome)
        except asyncio.CancelledError:
            pass  # the worker gave up on this attempt (shutdown): its job was fenced
        except BaseException:  # a bug in awa itself: the heartbeat rescuer will retry the job
            # (BaseException too: a KeyboardInterrupt out of here stopped the whole worker
            # with every attempt left running.)
            logger.exception("awa: unexpected error running job %s", attempt.key[0])
        finally:
            if attempt.handler_started and attempt.cancel_reason is not None:
                self._observer.handler_stopped(job, attempt.cancel_reason)
            # If the job was cancelled or rescued and then re-claimed by this worker while
            # this (now stale) attempt still ran, the job's entry belongs to the new
            # attempt, which must keep its heartbeat and fencing.
            self._forget(attempt)
            self.finished += 1
            if not attempt.abandoned:  # an abandoned attempt's permit is released by that path
                attempt.permit.release()
            if attempt.thread is None or attempt.thread.done():
                # The job and its attempt point at each other: left so, a finished job and
                # its args live until a full garbage collection (ADR 0020). Kept while a
                # given-up thread may still ask job.is_cancelled().
                job._attempt = None

    async def _execute(self, attempt: Attempt) -> results.Finalization | None:
        job = attempt.job
        if not await self._may_start(attempt):
            return None
        task = self._registry.get(job.kind)
        if task is None:  # not ours to fail: another process may run it (ADR 0027)
            return results.handed_back(job)  # no handler starts, so no job_started
        undecodable = None
        try:  # before job_started: hooks see the args as the handler will
            job.args = decode_args(task.args_type, job.args)
        except SerializationError as exc:
            undecodable = exc
        if job.attempted_at is not None:
            self._observer.job_started(job, (job.attempted_at - job.run_at).total_seconds())
        if undecodable is not None:
            return attempt.failed(str(undecodable), "SerializationError", terminal=True)
        try:
            if task.is_async:
                value = await self._run_async(task, attempt)
            else:
                value = await self._run_sync(task, attempt)
        except _StoppedByWorker:
            return attempt.cut_short()
        except asyncio.CancelledError as exc:
            if attempt.cancel_reason is not None:
                return None  # cancelled by an operator or a lost lease: the row moved on already
            if _being_cancelled():
                raise  # not ours: the worker task itself is being cancelled
            # The handler's own (it awaited something cancelled, or a cancelled
            # concurrent future): an error like any other, not a silent exit.
            return attempt.raised(exc)
        except _Escaped as escaped:  # a plain def's, carried out of its thread
            return self._raised(attempt, escaped.original)
        except BaseException as exc:
            return self._raised(attempt, exc)
        self._tell_if_stopped_by_clock(attempt)
        if attempt.cancel_reason in STOPPED_BY_WORKER:
            # Returned after the worker stopped it (a plain def flagged, or an async one
            # that caught the cancellation): whether the work got done, a return after the
            # stop cannot say. One rule for both kinds.
            return attempt.cut_short()
        if attempt.cancel_reason is not None:  # stopped meanwhile: the row moved on
            return None
        return attempt.returned(value)

    def _raised(self, attempt: Attempt, exc: BaseException) -> results.Finalization | None:
        """The outcome of a handler that raised ``exc``."""
        self._tell_if_stopped_by_clock(attempt)
        if isinstance(exc, Exception):
            if attempt.cancel_reason is not None and attempt.cancel_reason not in STOPPED_BY_WORKER:
                # Raised because it was stopped (CallbackEnded from a wait, a plain def
                # seeing is_cancelled()): the row moved on; reported as the stop it was.
                return None
            return attempt.raised(exc)
        # SystemExit, KeyboardInterrupt, GeneratorExit from a handler: let out, they
        # would stop the worker's event loop with every attempt in flight left running.
        logger.warning("%s: handler raised %s; the worker goes on",
                       attempt.describe(), type(exc).__name__)  # fmt: skip
        return attempt.raised(exc)

    async def _may_start(self, attempt: Attempt) -> bool:
        """False when the handler must not start: the attempt was stopped before it
        began (lease lost, cancelled, shutdown), or its claim is older than
        ``revalidate_after_s`` — the process was frozen or starved between the claim and
        now, long enough for the job to be rescued and run elsewhere — and the database
        says it is no longer ours. (A handler's side effects cannot be fenced.)"""
        if attempt.cancel_reason not in (None, "deadline"):
            self._not_started(attempt, f"stopped before it began ({attempt.cancel_reason})")
            return False
        sent = time.monotonic()
        waited = sent - attempt.claimed_at
        if waited <= self.revalidate_after_s or self.revalidate is None:
            return True
        try:
            ours = attempt.job.id in await self.revalidate([attempt.key])
        except asyncio.CancelledError:
            if attempt.cancel_reason is None:
                raise  # not ours: the worker task itself is being cancelled
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # the heartbeat found the lease lost meanwhile
            ours = False
        except Exception as exc:  # cannot tell: the safe side is not to start it
            logger.warning("%s: could not re-check a %.1f s old claim: %s",
                           attempt.describe(), waited, exc)  # fmt: skip
            ours = False
        attempt.claimed_at = time.monotonic()
        if ours:
            self._lease_confirmed(attempt, sent)
            return True
        attempt.request_cancel("lease lost")
        self._not_started(attempt, f"its claim waited {waited:.1f} s and is no longer ours")
        return False

    @staticmethod
    def _not_started(attempt: Attempt, why: str) -> None:
        logger.info(
            "%s: handler not started: %s", attempt.describe(), why,
            extra={"event": "attempt_not_started", "job_id": attempt.job.id},
        )  # fmt: skip

    def _expire(self, attempt: Deadlined) -> None:
        """``attempt`` is due: at its deadline or its lease's limit, flag it (and cancel
        it when it is a coroutine); when it was asked to stop ``ABANDON_AFTER_S`` ago, give
        up on it."""
        assert isinstance(attempt, Attempt)
        if self._tell_if_stopped_by_clock(attempt):  # its handler saw the limit first
            return
        if attempt.cancel_reason is not None:
            self._give_up(attempt)
            return
        now = time.monotonic()
        lease = attempt.lease_until
        if lease is not None and lease <= now:
            if attempt.handler_started:
                self._say_unconfirmed(attempt, now - lease + self.lease_limit_s)
                self._stop_by_worker(attempt, LEASE_UNCONFIRMED)
                return
            # Not begun, nothing can run twice yet: a claim this old is first re-checked
            # with the database (_may_start), which sets the limit again if it is ours.
            # Stopped here, a claim whose reply came late was never run (a review).
            attempt.lease_until = None
        deadline = attempt.deadline_at
        if deadline is not None and deadline <= now:
            self._stop_by_worker(attempt, "deadline")

    def _say_unconfirmed(self, attempt: Attempt, unconfirmed_s: float, late: str = "") -> None:
        logger.warning(
            "%s: no heartbeat confirmed its lease for %.1f s (%s); stopping its handler "
            "before the job can be rescued and run elsewhere%s",
            attempt.describe(), unconfirmed_s, UNCONFIRMED_CAUSES, late,
            extra=job_fields(attempt.job, "lease_unconfirmed"),
        )  # fmt: skip

    # How late past a limit this loop must come to say it was held up (see _stopped_late).
    LOOP_LATE_S = 0.5

    def _tell_if_stopped_by_clock(self, attempt: Attempt) -> bool:
        """The handler read its stop off the clock before this loop could tell it (the
        watcher comes, or the handler ended): said now, and the stop goes on as the
        loop's own. False when there was no such stop."""
        if not attempt.stopped_by_clock:
            return False
        attempt.stopped_by_clock = False
        self._stopped_late(attempt)
        return True

    def _stopped_late(self, attempt: Attempt) -> None:
        """Say a stop the handler read off the clock (this loop blocked or starved, if it
        came late), then go on with it as with the loop's own."""
        now = time.monotonic()
        unconfirmed = attempt.cancel_reason == LEASE_UNCONFIRMED
        passed = attempt.lease_until if unconfirmed else attempt.deadline_at
        lateness = now - (passed or now)
        # A handler polling often reads the limit a few milliseconds before the loop's
        # own look on a healthy worker: no blocked loop to speak of then (a review saw
        # 9 of 10 such stops blamed on one).
        late = (
            f"; its handler saw the limit first: this worker's event loop came "
            f"{lateness:.1f} s late ({LOOP_STALLED})"
            if lateness >= self.LOOP_LATE_S
            else ""
        )
        if unconfirmed:
            self._say_unconfirmed(attempt, lateness + self.lease_limit_s, late)
        elif late:
            logger.warning(
                "%s: deadline of %d ms exceeded; stopping its handler%s",
                attempt.describe(), attempt.deadline_ms, late,
                extra=job_fields(attempt.job, "job_stopped"),
            )  # fmt: skip
        assert attempt.cancel_reason is not None  # set by is_cancelled() with the flag
        self._stop_by_worker(attempt, attempt.cancel_reason)

    def _stop_by_worker(self, attempt: Attempt, reason: str) -> None:
        attempt.request_cancel(reason)
        # Not _interrupt: a handler waiting for its callback would be woken to read its
        # row, which a worker cut off from the database cannot do.
        if attempt.interruptible and attempt.task is not None:
            attempt.task.cancel()
        self._stop_requested(attempt)

    def lease_confirmed(self, keys: list[results.AttemptKey], alive: set[int], sent: float) -> None:
        """A heartbeat sent at ``sent`` (monotonic) for ``keys`` found the attempts of
        ``alive`` still running under them: their leases hold until ``sent`` plus the limit."""
        for key in keys:
            attempt = self.attempts.get(key[0])
            if attempt is not None and attempt.key == key and key[0] in alive:
                self._lease_confirmed(attempt, sent)

    def _lease_confirmed(self, attempt: Attempt, sent: float) -> None:
        if self.lease_limit_s == math.inf:
            return
        until = sent + self.lease_limit_s
        if attempt.lease_until is None:  # lapsed before its handler began (see _expire)
            attempt.lease_until = until
            self.deadlines.noticed(until)
        elif until > attempt.lease_until:
            attempt.lease_until = until

    def _stop_requested(self, attempt: Attempt) -> None:
        """Give the handler ``ABANDON_AFTER_S`` to notice before it is abandoned."""
        attempt.stop_at = time.monotonic() + ABANDON_AFTER_S
        self.deadlines.noticed(attempt.stop_at)

    def _give_up(self, attempt: Attempt) -> None:
        if not attempt.handler_running:  # returning right now: it ends by itself
            attempt.stop_at = None
            return
        if attempt.cancel_reason == LEASE_UNCONFIRMED:
            self._keep_unconfirmed(attempt)
            return
        if self.abandoned.full:
            self.abandoned.refused(attempt)
            self._stop_requested(attempt)  # look again later: the limit may have room
            return
        attempt.stop_at = None
        attempt.stuck = False
        self._forget(attempt)  # no more heartbeats, fencing or deadlines
        self.abandoned.take(attempt)

    def _keep_unconfirmed(self, attempt: Attempt) -> None:
        """A handler stopped for its unconfirmed lease that runs on (a plain ``def`` that
        does not look at ``job.is_cancelled()``) is not abandoned: abandoned, its retry was
        written and its job claimed again while it still ran — the double run the stop is
        for, made by the stop when the database was only slow (a review). It keeps its
        permit and its heartbeats, so the job stays its own, until it returns; cut off for
        real, the job is rescued elsewhere whatever this process does."""
        attempt.stop_at = None
        attempt.stuck = True
        logger.warning(
            "%s: handler still running %.0f s after it was stopped for its unconfirmed "
            "lease; a plain def cannot be interrupted: it keeps its permit and its "
            "heartbeats until it returns, and its job is then retried",
            attempt.describe(), ABANDON_AFTER_S,
            extra={"event": "handler_stuck", "job_id": attempt.job.id},
        )  # fmt: skip

    async def _run_async(self, task: Task, attempt: Attempt) -> Any:
        if attempt.cancel_reason == "deadline":  # expired before the handler started
            raise _StoppedByWorker()
        if attempt.cancel_reason is not None:  # asked to stop while _may_start awaited
            raise asyncio.CancelledError()
        attempt.handler_started = True
        attempt.interruptible = True
        try:
            return await task.handler(attempt.job)
        except asyncio.CancelledError:
            if attempt.cancel_reason in STOPPED_BY_WORKER:
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                raise _StoppedByWorker() from None
            raise
        finally:
            attempt.interruptible = False

    async def _run_sync(self, task: Task, attempt: Attempt) -> Any:
        # A thread cannot be interrupted: at the deadline the attempt is only flagged, and
        # the handler is expected to notice (job.is_cancelled()); its permit stays taken
        # until the thread is free.
        # In a copy of the attempt task's context, as asyncio.to_thread does: whatever the
        # attempt made current (its trace span, a request id) is current in the handler too.
        context = contextvars.copy_context()
        attempt.handler_started = True
        attempt.thread = self._threads.submit(_in_thread, context, task.handler, attempt.job)
        return await asyncio.wrap_future(attempt.thread)  # _Escaped: unwrapped by _execute

    # -- control ---------------------------------------------------------------------

    def cancel(
        self,
        job_id: int,
        reason: str,
        run_lease: int | None = None,
        key: results.AttemptKey | None = None,
    ) -> bool:
        """Ask a running attempt to stop; async handlers are cancelled at their next await.
        ``key`` names the very attempt (its run_lease among the rest): a job claimed again
        after a crash keeps its run_lease (ADR 0006), so a lease alone may name the
        attempt that replaced it."""
        attempt = self.attempts.get(job_id)
        if attempt is None or (run_lease is not None and attempt.run_lease != run_lease):
            return False
        if key is not None and attempt.key != key:
            return False
        if attempt.request_cancel(reason):
            _interrupt(attempt)
            self._stop_requested(attempt)
        return True

    def census(self) -> dict[str, Census]:
        """Per queue: handlers running (holding permits), of which stuck, and abandoned."""
        counts: dict[str, Census] = {}
        for attempt in self._watched():
            census = counts.setdefault(attempt.job.queue, Census())
            census.running += 1
            census.stuck += attempt.stuck
        for queue, n in self.abandoned.per_queue().items():
            counts.setdefault(queue, Census()).abandoned = n
        return counts

    def in_flight(self) -> list[results.AttemptKey]:
        """The fencing keys of every attempt whose handler is still running."""
        return [a.key for a in self.attempts.values()]

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no handler runs (True) or the timeout passes (False)."""
        tasks = [a.task for a in self._watched() if a.task is not None]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def abandon(self, grace_s: float = 1.0) -> list[Attempt]:
        """Cancel every remaining attempt, wait up to ``grace_s`` for their tasks to end,
        and return those whose handler still runs: a plain ``def`` handler's thread (it
        cannot be interrupted) or a coroutine that ignored its cancellation."""
        attempts = self._watched()
        ends: list[asyncio.Future[Any]] = []
        for attempt in attempts:
            attempt.request_cancel("shutdown")
            if attempt.task is not None:
                attempt.task.cancel()
                ends.append(attempt.task)
            if attempt.thread is not None and not attempt.thread.done():
                # A plain def's task ends at its cancellation, its thread only when the
                # handler returns (it sees job.is_cancelled()): wait for that too.
                thread_end = asyncio.wrap_future(attempt.thread)
                thread_end.add_done_callback(_retrieved)
                ends.append(thread_end)
        if ends:
            await asyncio.wait(ends, timeout=grace_s)
        given_up = [*attempts, *self.abandoned.attempts.values()]
        return [attempt for attempt in given_up if attempt.handler_running]

    def close(self) -> None:
        """Release the handler threads without waiting for abandoned sync handlers (they
        are daemon threads: they do not keep the process alive)."""
        self._threads.shutdown(wait=False, cancel_futures=True)


@dataclass(slots=True)
class Census:
    """One queue's handlers in this worker (see :meth:`Executor.census`)."""

    running: int = 0
    stuck: int = 0
    abandoned: int = 0


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark an abandoned thread's outcome as seen (the attempt's own task reports it)."""
    if not future.cancelled():
        future.exception()


def _interrupt(attempt: Attempt) -> None:
    """Stop a handler asked to stop (its cancel_reason set): an async one at its next
    await. One waiting for its callback is woken instead: the wait raises CallbackEnded
    (and cancels the task at its next await, see callback_wait)."""
    wake = attempt.callback_wake
    if wake is not None and attempt.cancel_reason != "shutdown":
        wake.set()
    # Only a handler under way: a task not started yet would never run its clean-up (its
    # permit and its entry here would leak, its job heartbeated for ever); it sees the
    # request before its handler starts (_may_start).
    elif attempt.interruptible and attempt.task is not None:
        attempt.task.cancel()


class _StoppedByWorker(Exception):
    """Internal: the worker stopped the attempt itself (its deadline, its lease's limit)."""


def _being_cancelled() -> bool:
    """Whether the running task was asked to stop (shutdown), rather than merely seeing a
    ``CancelledError`` its own code raised."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _Escaped(Exception):
    """A sync handler's exception that its thread's future cannot hand over as itself,
    carried out in this wrapper and unwrapped by ``_execute``: a ``BaseException``
    (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``: awaited as the future's own,
    a ``GeneratorExit`` would be thrown into the awaiting coroutines and close them), and
    ``StopIteration``, which an asyncio future refuses outright (TypeError in a callback):
    the await never ended, and the job stayed ``running`` with its permit for good (a
    review: ``next()`` over an empty iterator). Re-raised in a coroutine, it would become
    a RuntimeError (PEP 479). Only the type's name here: its ``repr`` is the handler's
    code, and may raise."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(type(original).__qualname__)
        self.original = original


def _in_thread(context: contextvars.Context, handler: Callable[[Any], Any], job: Any) -> Any:
    try:
        return context.run(handler, job)
    except StopIteration as exc:
        raise _Escaped(exc) from None
    except Exception:
        raise
    except BaseException as exc:
        raise _Escaped(exc) from None
