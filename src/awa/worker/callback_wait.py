"""A handler waiting for its callback inside the attempt: ``job.wait_for_callback(id)``.

Unlike returning ``WaitForCallback`` (the handler ends and the job is parked), the
handler stays where it is, holding its permit, and goes on with the payload of
``resume_external`` — as many times as it registers a new callback (ADR 0029):

1. the id must be the one this attempt registered last (``job.register_callback``);
2. the attempt's deadline is paused, in this process and in the row (``job_callback_wait``).
   The row stays ``running`` under its lease: the handler still holds a permit and counts
   against every limit (a fleet cap above all), and heartbeats, cancel, the shutdown fence
   and the rescue of a dead process treat it like any running attempt;
3. the handler sleeps until the worker hears ``resumed`` on ``awa_control`` for this job,
   or until its next poll (50 ms, doubling up to 2 s: a notice can be lost), and reads
   ``job_callback_state`` — :func:`decide` says whether it is still waiting, resumed,
   timed out (``callback_timeout_at`` passed: :class:`~awa.errors.CallbackTimeout`, an
   ordinary handler error, so the job is retried or fails on its last attempt), or over;
4. resumed: ``job_callback_resumed`` restarts the deadline with the time that was left,
   and the payload is returned. Over (completed or failed from outside, cancelled,
   rescued): :class:`~awa.errors.CallbackEnded` — also when the cancel's notice or the
   heartbeat reaches the worker before the poll does (they wake the wait, not cancel it;
   ``complete_external`` and ``fail_external`` send the same notice as a resume).

An answer may come before step 2 (the partner is fast): ``resume_external`` clears the
id of the running row, step 2 changes nothing, and step 3 sees the resume at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from awa.client.callbacks import callback_uuid
from awa.db import sql
from awa.errors import CallbackEnded, CallbackTimeout, ValidationError
from awa.types import Job, JobState

if TYPE_CHECKING:
    from awa.worker.attempt import Attempt

FIRST_POLL_S = 0.05
MAX_POLL_S = 2.0


class Waiters:
    """The handlers of one worker waiting for a callback, by job id, to wake on a notice."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}

    def wake(self, job_id: int) -> None:
        """A ``resumed`` notice named ``job_id``: look now instead of at the next poll."""
        event = self._events.get(job_id)
        if event is not None:
            event.set()

    @contextlib.contextmanager
    def waiting(self, job_id: int) -> Iterator[asyncio.Event]:
        """The wake-up event of ``job_id`` while its handler waits."""
        event = self._events[job_id] = asyncio.Event()
        try:
            yield event
        finally:
            if self._events.get(job_id) is event:
                del self._events[job_id]


class Verdict(enum.Enum):
    """What a poll of the row says about a wait."""

    WAITING = "waiting"
    RESUMED = "resumed"
    TIMED_OUT = "timed_out"
    ENDED = "ended"


def decide(row: Sequence[Any] | None, job: Job[Any], callback_id: str) -> Verdict:
    """Read one ``job_callback_state`` row (I/O-free).

    The attempt is ours only while the row is ``running`` under our lease and attempt
    time. With our id still on it, we wait (unless its timeout passed); with the id
    cleared — only ``resume_external`` does that to a running row — we were answered.
    Anything else (another id, another attempt, another state, no row) ends the wait.
    """
    if row is None:
        return Verdict.ENDED
    state, run_lease, attempted_at, current_id, _payload, expired = row
    if state != JobState.RUNNING or (run_lease, attempted_at) != (
        job.run_lease,
        job.attempted_at,
    ):
        return Verdict.ENDED
    if current_id is None:
        return Verdict.RESUMED
    if str(current_id) != callback_id:
        return Verdict.ENDED
    return Verdict.TIMED_OUT if expired else Verdict.WAITING


@contextlib.contextmanager
def _wakeable(attempt: Attempt, wake: asyncio.Event) -> Iterator[None]:
    """While the handler waits, a stop from outside (an operator's cancel, a lease the
    heartbeat found gone) wakes it instead of cancelling it: however the end is learnt,
    the handler gets CallbackEnded."""
    attempt.callback_wake = wake
    try:
        yield
    finally:
        attempt.callback_wake = None


def _cancel_at_next_await(attempt: Attempt) -> None:
    """An async handler stopped from outside gets CallbackEnded now and, as any stopped
    async handler, CancelledError at its next await: one that catches the first and goes
    on working is still stopped. A wait the handler runs in a task of its own (gather,
    wait_for on 3.11) cannot hand it CallbackEnded first: the handler's await of that task
    is cancelled. (A plain def handler is not interruptible: it sees job.is_cancelled().)"""
    task = attempt.task
    if not attempt.interruptible or task is None:
        return
    cancel = task.cancel
    if asyncio.current_task() is task:
        cancel()
    else:
        # Cancelled now, the handler's await of the waiting task would be resolved by
        # the CallbackEnded it is about to raise, and the request lost: cancel it once
        # that task has ended (the handler is then still awaiting it, or past it).
        asyncio.get_running_loop().call_soon(cancel)


def _attempt_params(attempt: Attempt) -> dict[str, Any]:
    job_id, run_lease, attempted_at = attempt.key
    return {"id": job_id, "run_lease": run_lease, "attempted_at": attempted_at}


async def _read(pool: AsyncConnectionPool, job: Job[Any]) -> Sequence[Any] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(sql.JOB_CALLBACK_STATE, {"id": job.id})
        return await cur.fetchone()


async def wait(
    pool: AsyncConnectionPool, waiters: Waiters, attempt: Attempt, callback_id: Any
) -> Any:
    """Wait inside ``attempt`` until ``callback_id`` is resumed; returns its payload."""
    job, key = attempt.job, callback_uuid(callback_id)
    registered = attempt.callback_id
    if registered is None or key != registered:
        raise ValidationError(
            "callback_id",
            "wait_for_callback needs the id the latest job.register_callback() of this "
            f"attempt returned, got {callback_id!r}",
        )
    left = attempt.pause_deadline()
    with waiters.waiting(job.id) as wake, _wakeable(attempt, wake):
        async with pool.connection() as conn:
            await conn.execute(
                sql.JOB_CALLBACK_WAIT, {**_attempt_params(attempt), "callback_id": key}
            )
        row, verdict, delay = None, Verdict.WAITING, FIRST_POLL_S
        while verdict is Verdict.WAITING:
            row = await _read(pool, job)
            verdict = decide(row, job, key)
            if verdict is Verdict.WAITING and attempt.cancel_reason is not None:
                verdict = Verdict.ENDED  # stopped from outside, the row not moved on (yet)
            if verdict is Verdict.WAITING:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await wake.wait()
                wake.clear()
                delay = min(delay * 2, MAX_POLL_S)
    if attempt.cancel_reason is not None:  # stopped from outside, whatever the last read said
        _cancel_at_next_await(attempt)
        raise CallbackEnded(job.id, JobState(row[0]) if row is not None else None)
    if verdict is Verdict.TIMED_OUT:
        raise CallbackTimeout(job.id, key)
    if verdict is Verdict.ENDED:
        raise CallbackEnded(job.id, JobState(row[0]) if row is not None else None)
    assert row is not None
    left_ms = None if left is None else int(left * 1000)
    async with pool.connection() as conn:
        await conn.execute(
            sql.JOB_CALLBACK_RESUMED, {**_attempt_params(attempt), "deadline_left_ms": left_ms}
        )
    attempt.resume_deadline(left)
    return row[4]
