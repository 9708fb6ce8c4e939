"""Several external waits inside one handler: ``job.wait_for_callback`` and
``resume_external`` on a real worker and PostgreSQL (issue 20, ADR 0029)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

import awa
from awa.worker import callback_wait
from tests.helpers import FAST_WORKER, wait_for


async def _waiting(client: awa.AsyncClient, job_id: int) -> str:
    """Wait until the handler of ``job_id`` waits for its callback; returns the id.

    The row stays running; the wait shows as the callback id with the deadline paused.
    """
    pool = await client._get_pool()

    async def waits() -> str | None:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT callback_id FROM awa.jobs WHERE id = %s AND state = 'running' "
                "AND callback_id IS NOT NULL AND deadline_at IS NULL",
                (job_id,),
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    token: str = await wait_for(waits)
    return token


async def _state(client: awa.AsyncClient, job_id: int, state: awa.JobState) -> awa.Job[Any]:
    async def reached() -> awa.Job[Any] | None:
        job = await client.get_job(job_id)
        return job if job.state is state else None

    job: awa.Job[Any] = await wait_for(reached)
    return job


class Steps:
    """What a two-step handler saw, and the callback ids it handed out, in order."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.payloads: list[Any] = []
        self.ended: list[BaseException] = []
        self.issued = asyncio.Event()

    async def next_token(self, count: int) -> str:
        await wait_for(lambda: _true(len(self.tokens) >= count))
        return self.tokens[count - 1]


async def _true(value: bool) -> bool:
    return value


def _two_step(client: awa.AsyncClient, steps: Steps, timeout: float = 60) -> None:
    @client.task(None, kind="order", queue="q")
    async def order(job: awa.Job[Any]) -> None:
        try:
            for _ in range(2):
                token = await job.register_callback(timeout_seconds=timeout)
                steps.tokens.append(token)
                steps.payloads.append(await job.wait_for_callback(token))
        except (awa.CallbackEnded, awa.CallbackTimeout, asyncio.CancelledError) as exc:
            # Ended by the poll that sees the row moved on, or by the heartbeat that finds
            # the lease gone first: either way the handler stops.
            steps.ended.append(exc)
            raise


async def test_two_waits_in_one_handler_complete_without_a_new_attempt(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    steps = Steps()
    _two_step(client, steps)
    job = await client.insert({}, kind="order", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        first = await steps.next_token(1)
        assert await _waiting(client, job.id) == first  # running, deadline paused
        parked = await client.get_job(job.id)
        resumed = await client.resume_external(first, payload={"paid": 10})
        assert resumed.state is awa.JobState.RUNNING
        assert resumed.run_lease == parked.run_lease  # the same attempt goes on

        second = await steps.next_token(2)
        assert second != first
        assert await _waiting(client, job.id) == second
        with pytest.raises(awa.CallbackNotFound):  # the first id is spent
            await client.resume_external(first, payload={"paid": 99})
        await client.resume_external(second, payload={"shipped": True})
        done = await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert steps.payloads == [{"paid": 10}, {"shipped": True}]
    assert done.attempt == 1 and done.run_lease == parked.run_lease and done.errors == []
    row = db.execute("SELECT deadline_at FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
    assert row is not None and row[0] is not None  # the deadline ran again after the resume


async def test_a_callback_that_arrives_before_the_wait_is_not_lost(
    client: awa.AsyncClient,
) -> None:
    registered = asyncio.Event()
    go_on = asyncio.Event()
    seen: list[Any] = []

    @client.task(None, kind="fast_partner", queue="q")
    async def fast_partner(job: awa.Job[Any]) -> None:
        token = await job.register_callback()
        seen.append(token)
        registered.set()
        await go_on.wait()  # the partner answers before we start waiting
        seen.append(await job.wait_for_callback(token))

    job = await client.insert({}, kind="fast_partner", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await asyncio.wait_for(registered.wait(), 15)
        early = await client.resume_external(seen[0], payload=[1, 2, 3])
        assert early.state is awa.JobState.RUNNING
        go_on.set()
        await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert seen[1] == [1, 2, 3]


async def test_sync_handler_waits_too(client: awa.AsyncClient) -> None:
    tokens: list[str] = []
    payloads: list[Any] = []

    @client.task(None, kind="sync_order", queue="q")
    def sync_order(job: awa.Job[Any]) -> None:
        for _ in range(2):
            token = job.register_callback_sync(timeout_seconds=60)
            tokens.append(token)
            payloads.append(job.wait_for_callback_sync(token))
        assert threading.current_thread().name.startswith("awa-job")

    job = await client.insert({}, kind="sync_order", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        for n in (1, 2):
            await wait_for(lambda n=n: _true(len(tokens) >= n))
            assert await _waiting(client, job.id) == tokens[n - 1]
            await client.resume_external(tokens[n - 1], payload=n)
        done = await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert payloads == [1, 2] and done.attempt == 1


async def test_completing_instead_of_resuming_ends_the_wait(client: awa.AsyncClient) -> None:
    steps = Steps()
    _two_step(client, steps)
    job = await client.insert({}, kind="order", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        token = await steps.next_token(1)
        await _waiting(client, job.id)
        done = await client.complete_external(token, payload={"skip": "rest"})
        assert done.state is awa.JobState.COMPLETED
        await wait_for(lambda: _true(bool(steps.ended)))
    finally:
        await client.shutdown()
    (ended,) = steps.ended
    assert isinstance(ended, awa.CallbackEnded) and ended.state is awa.JobState.COMPLETED
    final = await client.get_job(job.id)
    assert final.state is awa.JobState.COMPLETED and final.errors == []  # late outcome fenced


async def test_timeout_while_waiting_ends_the_attempt(client: awa.AsyncClient) -> None:
    steps = Steps()
    _two_step(client, steps, timeout=0.2)
    job = await client.insert({}, kind="order", queue="q", max_attempts=1)
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await wait_for(lambda: _true(bool(steps.ended)))
        failed = await _state(client, job.id, awa.JobState.FAILED)  # its last attempt
    finally:
        await client.shutdown()
    assert isinstance(steps.ended[0], awa.CallbackTimeout)
    (error,) = failed.errors  # the handler's own error, as for any exception it raises
    assert error["type"] == "CallbackTimeout" and steps.tokens[0] in error["error"]
    assert failed.attempt == 1 and len(steps.tokens) == 1


async def test_cancel_while_waiting_stops_the_handler(client: awa.AsyncClient) -> None:
    """Whichever reaches the waiting handler first, the cancel notice or the wait's own
    poll of the row, the handler gets CallbackEnded, as for any end from outside (the
    notice cancelled the task: CancelledError)."""
    stopped: list[BaseException] = []

    @client.task(None, kind="patient", queue="q")
    async def patient(job: awa.Job[Any]) -> None:
        token = await job.register_callback()
        try:
            await job.wait_for_callback(token)
        except (asyncio.CancelledError, awa.CallbackEnded) as exc:
            stopped.append(exc)
            raise

    job = await client.insert({}, kind="patient", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await _waiting(client, job.id)
        cancelled = await client.cancel(job.id)
        assert cancelled.state is awa.JobState.CANCELLED
        await wait_for(lambda: _true(bool(stopped)))
    finally:
        await client.shutdown()
    assert (await client.get_job(job.id)).state is awa.JobState.CANCELLED
    [ended] = stopped
    assert isinstance(ended, awa.CallbackEnded) and ended.state is awa.JobState.CANCELLED


@pytest.mark.parametrize("end", ["complete", "fail"])
async def test_an_end_the_heartbeat_learns_of_first_is_callback_ended_too(
    client: awa.AsyncClient, end: str
) -> None:
    """No notice reaches the worker and the wait polls every 2 s by then: the heartbeat
    finds the lease gone first, and it cancelled the task (CancelledError, not the
    documented CallbackEnded). It wakes the wait now."""
    steps = Steps()
    _two_step(client, steps)
    job = await client.insert({}, kind="order", queue="q", max_attempts=1)
    await client.start([("q", 1)], **{**FAST_WORKER, "heartbeat_interval_ms": 100})
    try:
        token = await steps.next_token(1)
        await _waiting(client, job.id)
        await client._worker.listener.stop()  # neither the resume-style notice arrives
        await asyncio.sleep(1.6)  # the wait's polls are 0.8-1.6 s apart by now
        if end == "complete":
            await client.complete_external(token)
        else:
            await client.fail_external(token, "declined")
        await wait_for(lambda: _true(bool(steps.ended)))
    finally:
        await client.shutdown()
    [ended] = steps.ended
    assert isinstance(ended, awa.CallbackEnded)


async def test_shutdown_while_waiting_returns_the_job(client: awa.AsyncClient) -> None:
    steps = Steps()
    _two_step(client, steps)
    job = await client.insert({}, kind="order", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    token = await steps.next_token(1)
    await _waiting(client, job.id)
    await client.shutdown(timeout_ms=100)
    back = await client.get_job(job.id)
    # Fenced to retryable, due now (the leader may promote it before it stops).
    assert back.state in (awa.JobState.RETRYABLE, awa.JobState.AVAILABLE)
    assert "shut down" in back.errors[-1]["error"] and back.attempt == 1
    with pytest.raises(awa.CallbackNotFound):  # nobody waits for it any more
        await client.resume_external(token, payload=1)


async def test_resume_of_a_job_parked_by_returning_runs_it_again(client: awa.AsyncClient) -> None:
    runs: list[Any] = []

    @client.task(None, kind="parked", queue="q")
    async def parked(job: awa.Job[Any]) -> awa.WaitForCallback | None:
        runs.append(job.metadata.get("callback_payload"))
        if len(runs) > 1:
            return None
        return awa.WaitForCallback(await job.register_callback())

    job = await client.insert({}, kind="parked", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        waiting = await _state(client, job.id, awa.JobState.WAITING_EXTERNAL)
        row = await client.get_job(job.id)
        assert row.attempt == 1
        token = await _token(client, waiting.id)
        resumed = await client.resume_external(token, payload={"go": 1})
        assert resumed.state is awa.JobState.AVAILABLE  # nobody waits in a handler: run again
        await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert runs == [None, {"go": 1}]


async def test_a_resume_runs_the_parked_attempt_on_and_spends_no_attempt(
    client: awa.AsyncClient,
) -> None:
    """Each park-and-resume spent an attempt: a job of max_attempts=2 ran its resumed
    handler as attempt 2 of 2 (4 of 2 after three resumes), and one error then failed it."""
    runs: list[int] = []

    @client.task(None, kind="parked", queue="q")
    async def parked(job: awa.Job[Any]) -> awa.WaitForCallback | awa.RetryAfter | None:
        runs.append(job.attempt)
        if len(runs) in (1, 2):  # parks twice
            return awa.WaitForCallback(await job.register_callback())
        if len(runs) == 3:  # the resumed run meets a transient error: retried
            return awa.RetryAfter(0.01)
        return None

    job = await client.insert({}, kind="parked", queue="q", max_attempts=2)
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        for round_ in (1, 2):
            await wait_for(lambda n=round_: _parked_run(client, job.id, runs, n))
            resumed = await client.resume_external(await _token(client, job.id), payload=round_)
            assert resumed.attempt == 0 and resumed.state is awa.JobState.AVAILABLE
        done = await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert runs == [1, 1, 1, 2] and done.attempt == 2


async def test_an_answer_before_the_park_spends_no_attempt_either(
    client: awa.AsyncClient,
) -> None:
    """A fast webhook answered before the handler returned WaitForCallback: the leader
    made the parked job available again, as a resume does, but kept the spent attempt
    (attempt 4 of 2 after three such rounds; a review of the resume's fix)."""
    runs: list[int] = []

    @client.task(None, kind="fast_hook", queue="q")
    async def fast_hook(job: awa.Job[Any]) -> awa.WaitForCallback | None:
        runs.append(job.attempt)
        if len(runs) > 2:
            return None
        callback_id = await job.register_callback()
        await client.resume_external(callback_id, payload=len(runs))  # the webhook, early
        return awa.WaitForCallback(callback_id)

    job = await client.insert({}, kind="fast_hook", queue="q", max_attempts=2)
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        done = await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert runs == [1, 1, 1] and done.attempt == 1


async def _parked_run(client: awa.AsyncClient, job_id: int, runs: list[int], n: int) -> bool:
    row = await client.get_job(job_id)
    return len(runs) == n and row.state is awa.JobState.WAITING_EXTERNAL


async def _token(client: awa.AsyncClient, job_id: int) -> str:
    pool = await client._get_pool()
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT callback_id FROM awa.jobs WHERE id = %s", (job_id,))
        row = await cur.fetchone()
    assert row is not None and row[0] is not None
    return str(row[0])


async def test_waiting_on_an_id_this_attempt_did_not_register_is_refused(
    client: awa.AsyncClient,
) -> None:
    errors: list[str] = []

    @client.task(None, kind="confused", queue="q")
    async def confused(job: awa.Job[Any]) -> None:
        first = await job.register_callback()
        await job.register_callback()  # replaces the first
        for bad in (first, "not-a-uuid"):
            try:
                await job.wait_for_callback(bad)
            except awa.ValidationError as exc:
                errors.append(exc.field)

    job = await client.insert({}, kind="confused", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert errors == ["callback_id", "callback_id"]


def test_sync_client_resume_external(sync_client: awa.Client) -> None:
    with pytest.raises(awa.CallbackNotFound):
        sync_client.resume_external("00000000-0000-0000-0000-000000000001", payload=None)
    with pytest.raises(awa.ValidationError, match="callback_id"):
        sync_client.resume_external("nope")


async def test_a_waiting_handler_still_counts_against_a_fleet_cap(
    client: awa.AsyncClient,
) -> None:
    """Invariant 8: with concurrency=1, a job whose handler waits for a callback keeps the
    queue's one slot; the next job starts only after it finished (recorded times)."""
    spans: dict[str, list[float]] = {}
    loop = asyncio.get_running_loop()

    @client.task(None, kind="step", queue="capped")
    async def step(job: awa.Job[Any]) -> None:
        spans[job.args["name"]] = [loop.time()]
        if job.args["name"] == "first":
            token = await job.register_callback()
            await job.wait_for_callback(token)
        spans[job.args["name"]].append(loop.time())

    await client.set_queue_limits("capped", concurrency=1)
    first = await client.insert({"name": "first"}, kind="step", queue="capped")
    second = await client.insert({"name": "second"}, kind="step", queue="capped")
    await client.start([("capped", 2)], **FAST_WORKER)
    try:
        token = await _waiting(client, first.id)

        async def held_back() -> bool:
            reasons = (await client.explain(second.id)).reasons
            return reasons[0].code is awa.ReasonCode.CONCURRENCY_LIMIT

        await wait_for(held_back)
        assert (await client.get_job(second.id)).state is awa.JobState.AVAILABLE
        await client.resume_external(token, payload=None)
        await _state(client, second.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert spans["first"][1] <= spans["second"][0]  # never both at once


async def test_a_handler_that_catches_callback_ended_is_still_stopped(
    client: awa.AsyncClient,
) -> None:
    """Woken instead of cancelled, a handler that caught CallbackEnded and went on working
    was never stopped: abandoned 5 s later, its cancelled hook that late (a review). It
    gets CancelledError at its next await, as any stopped async handler does."""
    seen: list[str] = []
    hooks: list[int] = []
    client.on_event("cancelled", lambda e: hooks.append(e.job.id))

    @client.task(None, kind="stubborn", queue="q")
    async def stubborn(job: awa.Job[Any]) -> None:
        token = await job.register_callback()
        try:
            await job.wait_for_callback(token)
        except awa.CallbackEnded:
            seen.append("ended")
        try:
            await asyncio.Event().wait()  # goes on working
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    job = await client.insert({}, kind="stubborn", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await _waiting(client, job.id)
        await client.cancel(job.id)
        await wait_for(lambda: _true(seen == ["ended", "cancelled"] and hooks == [job.id]))
        permits = client._worker.dispatchers["q"].permits
        await wait_for(lambda: _true(permits.in_flight == 0))
    finally:
        await client.shutdown()


async def test_a_cancel_during_the_read_that_sees_a_resume_still_ends_the_wait(
    client: awa.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel landed while the wait read a row just resumed: the read said RESUMED
    and the handler got the payload and ran on (a review). A stop from outside ends the
    wait whatever its last read said. The read is made slow to open the window."""
    read = callback_wait._read

    async def slow_read(*args: Any) -> Any:
        row = await read(*args)
        await asyncio.sleep(0.3)
        return row

    monkeypatch.setattr(callback_wait, "_read", slow_read)
    outcome: list[object] = []

    @client.task(None, kind="answered", queue="q")
    async def answered(job: awa.Job[Any]) -> None:
        token = await job.register_callback()
        steps.tokens.append(token)
        try:
            outcome.append(await job.wait_for_callback(token))
        except awa.CallbackEnded as exc:
            outcome.append(exc)
            raise

    steps = Steps()
    job = await client.insert({}, kind="answered", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        token = await steps.next_token(1)
        await _waiting(client, job.id)
        await client.resume_external(token, payload={"ok": 1})
        await client.cancel(job.id)  # while the wait reads the resumed row
        await wait_for(lambda: _true(bool(outcome)))
    finally:
        await client.shutdown()
    assert isinstance(outcome[0], awa.CallbackEnded), outcome


async def test_a_wait_run_in_a_task_of_its_own_still_stops_the_handler(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A wait under gather() runs in a task of its own: cancelling only "the current task"
    left the handler running until it was abandoned (a review). Its await of that task is
    cancelled now."""
    seen: list[str] = []

    @client.task(None, kind="gathered", queue="q")
    async def gathered(job: awa.Job[Any]) -> None:
        token = await job.register_callback()
        try:
            try:
                await asyncio.gather(job.wait_for_callback(token))
            except awa.CallbackEnded:
                await asyncio.Event().wait()  # goes on working, if it is let
        except asyncio.CancelledError:
            seen.append("stopped")
            raise

    job = await client.insert({}, kind="gathered", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await _waiting(client, job.id)
        with caplog.at_level("WARNING", logger="awa"):
            await client.cancel(job.id)
            await wait_for(lambda: _true(seen == ["stopped"]))
    finally:
        await client.shutdown()
    assert "abandoned" not in caplog.text  # stopped, not given up on 5 s later
