"""A handler whose lease no heartbeat confirms for too long is stopped by its own worker
(heartbeat.unconfirmed_limit_s): cut off from the database, the worker cannot learn that
its job was rescued, and the handler would run beside the job's next run elsewhere."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awa.types import Job, JobState
from awa.worker import executor as executor_module
from awa.worker import results
from awa.worker.executor import Executor
from awa.worker.heartbeat import unconfirmed_limit_s
from awa.worker.observe import Observer
from awa.worker.registry import TaskRegistry
from tests.helpers import wait_for
from tests.unit.fakes import FakeCompleter, FakePermit


def _job(job_id: int = 7, attempted_at: datetime | None = None) -> Job[Any]:
    at = attempted_at or datetime.now(UTC)
    return Job(
        id=job_id, kind="k", queue="q", args={}, state=JobState.RUNNING, priority=2, attempt=1,
        max_attempts=25, run_lease=1, tags=[], metadata={}, progress=None, errors=[],
        created_at=at, run_at=at, attempted_at=at, deadline_at=None, finalized_at=None,
    )  # fmt: skip


class _Stops(Observer):
    """Records each handler the executor reports stopped."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def handler_stopped(self, job: Job[Any], reason: str) -> None:
        self.reasons.append(reason)


def _executor(
    handler: Any, lease_limit_s: float, observer: Observer | None = None
) -> tuple[Executor, FakeCompleter]:
    registry = TaskRegistry()
    registry.register(None, handler, kind="k", queue="q")
    completer = FakeCompleter()
    executor = Executor(registry, completer, threads=2, observer=observer)  # type: ignore[arg-type]
    executor.lease_limit_s = lease_limit_s
    return executor, completer


async def _released(permit: FakePermit) -> None:
    """Wait until the attempt holding ``permit`` has ended (it releases it once)."""

    async def released() -> bool:
        return permit.released == 1

    await wait_for(released, timeout=10)


def _stop(executor: Executor) -> None:
    for attempt in executor.attempts.values():
        assert attempt.task is not None
        attempt.task.cancel()


@pytest.mark.parametrize(
    ("interval_ms", "staleness_ms", "limit_s"),
    [
        (30_000, 90_000, 60.0),  # the defaults: the staleness less one interval
        (200, 1_500, 1.125),  # the tests' fast settings: less a quarter of the staleness
        (1_000, 1_200, 1.1),  # staleness barely past the interval: never below it
    ],
)
def test_the_limit_leaves_the_handler_time_to_stop_before_a_rescue(
    interval_ms: int, staleness_ms: int, limit_s: float
) -> None:
    limit = unconfirmed_limit_s(interval_ms, staleness_ms)
    assert limit == pytest.approx(limit_s)
    assert interval_ms / 1000 < limit < staleness_ms / 1000


async def test_each_confirming_beat_moves_the_limit_from_when_it_was_sent() -> None:
    async def handler(job: Job[Any]) -> None:
        await asyncio.Event().wait()

    executor, _ = _executor(handler, lease_limit_s=10.0)
    claimed_at = time.monotonic()
    job = _job()
    executor.launch(job, FakePermit(), deadline_ms=0, claimed_at=claimed_at)  # type: ignore[arg-type]
    attempt = executor.attempts[job.id]
    assert attempt.lease_until == claimed_at + 10 and attempt.due == attempt.lease_until
    key = attempt.key
    executor.lease_confirmed([key], {job.id}, claimed_at + 5)
    assert attempt.lease_until == claimed_at + 15
    executor.lease_confirmed([key], {job.id}, claimed_at + 1)  # a slower, older beat
    assert attempt.lease_until == claimed_at + 15
    executor.lease_confirmed([key], set(), claimed_at + 8)  # the beat did not find it
    other_claim = (job.id, 1, key[2] - timedelta(seconds=1))  # an older attempt's key
    executor.lease_confirmed([other_claim], {job.id}, claimed_at + 8)
    assert attempt.lease_until == claimed_at + 15
    _stop(executor)


async def test_the_deadline_stays_due_first_when_it_is_nearer() -> None:
    async def handler(job: Job[Any]) -> None:
        await asyncio.Event().wait()

    executor, _ = _executor(handler, lease_limit_s=60.0)
    executor.launch(_job(), FakePermit(), deadline_ms=1_000)  # type: ignore[arg-type]
    attempt = executor.attempts[7]
    assert attempt.due == attempt.deadline_at and attempt.deadline_at is not None
    assert attempt.lease_until is not None and attempt.deadline_at < attempt.lease_until
    _stop(executor)


async def test_no_limit_when_the_worker_sets_none() -> None:
    async def handler(job: Job[Any]) -> None:
        await asyncio.Event().wait()

    executor, _ = _executor(handler, lease_limit_s=math.inf)
    executor.launch(_job(), FakePermit(), deadline_ms=0)  # type: ignore[arg-type]
    attempt = executor.attempts[7]
    assert attempt.lease_until is None and attempt.due is None
    _stop(executor)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_an_unconfirmed_lease_stops_the_handler_and_retries_the_job(kind: str) -> None:
    stopped: list[str] = []

    async def async_handler(job: Job[Any]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append("cancelled")
            raise

    def sync_handler(job: Job[Any]) -> None:
        while not job.is_cancelled():
            time.sleep(0.01)
        stopped.append("flagged")

    handler = async_handler if kind == "async" else sync_handler
    stops = _Stops()
    executor, completer = _executor(handler, lease_limit_s=0.05, observer=stops)
    executor.start()
    permit = FakePermit()
    try:
        executor.launch(_job(), permit, deadline_ms=60_000)  # type: ignore[arg-type]
        await _released(permit)
    finally:
        await executor.stop()
        executor.close()
    assert stopped == ["cancelled" if kind == "async" else "flagged"]
    assert stops.reasons == ["lease unconfirmed"]  # awa_jobs_stopped_total's reason
    [outcome] = completer.outcomes
    assert outcome.state is JobState.RETRYABLE
    assert outcome.error is not None and outcome.error["type"] == "LeaseUnconfirmed"
    assert executor.in_flight() == []


async def test_a_claim_older_than_the_limit_runs_once_the_database_confirms_it() -> None:
    """A claim whose reply came late (a brief partition) is past the limit before its
    handler begins: nothing has run, so it is not stopped; the re-check of an old claim
    asks the database, and the handler runs under a limit counted from that (a review:
    the job was never run and, with max_attempts=1, ended failed)."""
    ran: list[int] = []

    async def handler(job: Job[Any]) -> None:
        ran.append(job.id)

    executor, completer = _executor(handler, lease_limit_s=5.0)
    answer = asyncio.Event()
    asked: list[float] = []

    async def revalidate(keys: list[results.AttemptKey]) -> set[int]:
        asked.append(time.monotonic())
        await answer.wait()  # the database answers after the watcher has looked
        return {key[0] for key in keys}

    executor.revalidate = revalidate
    executor.revalidate_after_s = 2.0
    executor.start()
    permit = FakePermit()
    try:
        job = _job()
        launched_at = time.monotonic()
        executor.launch(job, permit, deadline_ms=0, claimed_at=launched_at - 10)  # type: ignore[arg-type]
        attempt = executor.attempts[job.id]

        async def looked() -> bool:
            return bool(asked) and attempt.lease_until is None

        await wait_for(looked, timeout=10)
        assert attempt.cancel_reason is None
        answer.set()
        await _released(permit)
    finally:
        await executor.stop()
        executor.close()
    assert ran == [job.id]
    [outcome] = completer.outcomes
    assert outcome.state is JobState.COMPLETED
    # Counted again from the re-check (sent after the launch), not from the old claim.
    assert attempt.lease_until is not None and attempt.lease_until >= launched_at + 5.0


async def test_a_def_that_runs_on_after_its_stop_keeps_its_permit_and_its_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain def that ignores its stop is not abandoned: abandoned, its retry was written
    and its job claimed again while it still ran — a double run made by a stop that was
    not needed, the database only slow (a review)."""
    monkeypatch.setattr(executor_module, "ABANDON_AFTER_S", 0.05)
    finish = threading.Event()

    def ignores_its_stop(job: Job[Any]) -> None:
        finish.wait(30)

    executor, completer = _executor(ignores_its_stop, lease_limit_s=0.05)
    executor.start()
    permit = FakePermit()
    try:
        job = _job()
        executor.launch(job, permit, deadline_ms=0)  # type: ignore[arg-type]
        attempt = executor.attempts[job.id]

        async def looked_again() -> bool:  # stopped, then looked at again after the wait
            return attempt.cancel_reason is not None and attempt.stuck

        await wait_for(looked_again, timeout=10)
        assert permit.released == 0 and completer.outcomes == []
        assert executor.in_flight() == [attempt.key]  # still heartbeated: still its own
        finish.set()
        await _released(permit)
    finally:
        finish.set()
        await executor.stop()
        executor.close()
    [outcome] = completer.outcomes
    assert outcome.error is not None and outcome.error["type"] == "LeaseUnconfirmed"


@pytest.mark.parametrize("limit", ["lease", "deadline"])
async def test_a_def_handler_sees_its_limit_pass_while_the_event_loop_is_blocked(
    limit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop came from the event loop: blocked by another handler (a time.sleep in an
    async def), it told the polling def handler nothing, and the job ran on beside its
    rescued retry in another process for 11 s (a review). The handler now reads its limit
    off the clock; the worker says so, late, once its loop runs again."""
    seen: list[float] = []

    def polling(job: Job[Any]) -> None:
        while not job.is_cancelled():
            time.sleep(0.01)
        seen.append(time.monotonic())

    stops = _Stops()
    by_lease = limit == "lease"
    executor, completer = _executor(polling, lease_limit_s=0.2 if by_lease else 60, observer=stops)
    executor.start()
    permit = FakePermit()
    try:
        executor.launch(_job(), permit, deadline_ms=60_000 if by_lease else 200)  # type: ignore[arg-type]
        attempt = executor.attempts[7]
        await wait_for(lambda: _true(attempt.handler_started))
        _block_the_event_loop(1.0)  # as another handler would: the fault, not a wait
        loop_back = time.monotonic()
        await _released(permit)
    finally:
        await executor.stop()
        executor.close()
    assert seen and seen[0] < loop_back  # told while the loop was blocked
    assert stops.reasons == ["lease unconfirmed" if by_lease else "deadline"]
    [outcome] = completer.outcomes
    assert outcome.error is not None
    assert outcome.error["type"] == ("LeaseUnconfirmed" if by_lease else "DeadlineExceeded")
    [said] = [r for r in caplog.records if "its handler saw the limit first" in r.getMessage()]
    assert "event loop came" in said.getMessage() and "blocked by a handler" in said.getMessage()


async def _true(value: bool) -> bool:
    return value


def _block_the_event_loop(seconds: float) -> None:
    time.sleep(seconds)  # called from the loop's thread: nothing else on it runs meanwhile


async def test_a_def_handler_first_to_see_its_deadline_on_a_healthy_loop_blames_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Polling every millisecond, the handler reads its deadline off the clock just before
    the loop's own look: 9 of 10 such stops were logged as a blocked event loop (a
    review). Whichever is first, a healthy loop is not blamed."""

    def polling(job: Job[Any]) -> None:
        while not job.is_cancelled():
            time.sleep(0.001)

    executor, completer = _executor(polling, lease_limit_s=60)
    executor.start()
    try:
        for n in range(5):
            permit = FakePermit()
            executor.launch(_job(job_id=100 + n), permit, deadline_ms=100)  # type: ignore[arg-type]
            await _released(permit)
    finally:
        await executor.stop()
        executor.close()
    assert [o.error["type"] for o in completer.outcomes if o.error] == ["DeadlineExceeded"] * 5
    assert not [r for r in caplog.records if "event loop came" in r.getMessage()]
