"""client.explain (CONTRACT §11): each reason code, with a job put in exactly that
situation by real workers on real PostgreSQL; numbers in the message; order when several
reasons apply."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa.types import ReasonCode as C
from tests.helpers import FAST_WORKER, wait_for

# Workers publish their snapshot every 100 ms here, so explain sees them at once.
LIVE = {**FAST_WORKER, "runtime_snapshot_interval_ms": 100}
HERE = f"{socket.gethostname()} pid {os.getpid()}"


def codes(explanation: awa.Explanation) -> list[str]:
    return [r.code for r in explanation.reasons]


async def explained(
    client: awa.AsyncClient, job_id: int, *, first: str, contains: str = ""
) -> awa.Explanation:
    """Poll explain until its first reason is ``first`` and its message has ``contains``
    (a worker's snapshot reaches the database within its publish interval)."""

    async def ready() -> awa.Explanation | None:
        found = await client.explain(job_id)
        top = found.reasons[0]
        return found if top.code == first and contains in top.message else None

    result: awa.Explanation = await wait_for(ready)
    return result


async def live(client: awa.AsyncClient, queue: str) -> None:
    """Wait until a live worker's snapshot lists ``queue``."""

    async def listed() -> bool:
        instances = await client.list_runtime_instances()
        return any(i.snapshot and queue in i.snapshot.queues for i in instances)

    await wait_for(listed)


@pytest.fixture
def gate() -> asyncio.Event:
    return asyncio.Event()


def register_blocking(client: awa.AsyncClient, gate: asyncio.Event, queue: str = "q") -> None:
    @client.task(None, kind="block", queue=queue)
    async def block(job: awa.Job[Any]) -> None:
        job.set_progress(40, "copying rows")
        await job.flush_progress()
        await gate.wait()


def register_quick(client: awa.AsyncClient, queue: str = "q") -> None:
    @client.task(None, kind="quick", queue=queue)
    async def quick(job: awa.Job[Any]) -> None:
        return None


# -- not due yet -------------------------------------------------------------------------


async def test_scheduled_names_the_time(client: awa.AsyncClient) -> None:
    register_quick(client)
    await client.start([("q", 2)], **LIVE)
    try:
        await live(client, "q")
        run_at = datetime.now(UTC) + timedelta(hours=2, seconds=30)
        job = await client.insert({}, kind="quick", queue="q", run_at=run_at)
        found = await client.explain(job.id)
        assert codes(found) == [C.SCHEDULED]
        assert run_at.strftime("%Y-%m-%d %H:%M:%S UTC") in found.reasons[0].message
        assert "(in 2 h)" in found.reasons[0].message
        assert found.summary.startswith(f"Job {job.id} (quick) is scheduled to run at ")
        assert found.reasons[0].details["due_in_s"] == pytest.approx(7230, abs=5)
    finally:
        await client.shutdown()


async def test_scheduled_on_a_paused_queue_without_workers_names_all_three(
    client: awa.AsyncClient,
) -> None:
    job = await client.insert({}, kind="k", queue="q", run_at=datetime.now(UTC) + timedelta(1, 30))
    await client.pause_queue("q", paused_by="ops")
    found = await client.explain(job.id)
    assert codes(found) == [C.SCHEDULED, C.QUEUE_PAUSED, C.NO_LIVE_WORKER]
    assert "(in 1 d)" in found.reasons[0].message


async def test_retry_backoff_gives_the_error_and_the_next_attempt(
    client: awa.AsyncClient,
) -> None:
    @client.task(None, kind="flaky", queue="q")
    async def flaky(job: awa.Job[Any]) -> awa.RetryAfter:
        return awa.RetryAfter(600)

    await client.start([("q", 2)], **LIVE)
    try:
        job = await client.insert({}, kind="flaky", queue="q", max_attempts=5)
        found = await explained(client, job.id, first=C.RETRY_BACKOFF)
        message = found.reasons[0].message
        # Not a failure: the handler asked for the retry.
        assert message.startswith(
            "Attempt 1 of 5 asked to be retried later (retry requested after 600s). "
        )
        assert "(in 9 min 5" in message or "(in 10 min)" in message
        assert codes(found) == [C.RETRY_BACKOFF]
        assert found.reasons[0].details["attempt"] == 1
    finally:
        await client.shutdown()


async def test_a_handler_waiting_for_a_callback_is_shown_with_its_callback(
    client: awa.AsyncClient,
) -> None:
    tokens: asyncio.Queue[str] = asyncio.Queue()

    @client.task(None, kind="approve", queue="q")
    async def approve(job: awa.Job[Any]) -> None:
        token = await job.register_callback(timeout_seconds=600)
        await tokens.put(token)
        await job.wait_for_callback(token)

    await client.start([("q", 2)], **LIVE)
    try:
        job = await client.insert({}, kind="approve", queue="q")
        token = await asyncio.wait_for(tokens.get(), 15)
        found = await explained(client, job.id, first=C.RUNNING, contains="wait_for_callback")
        assert f"waits in wait_for_callback for callback {token}" in found.reasons[0].message
        assert found.reasons[0].details["callback_id"] == token
        await client.resume_external(token)
    finally:
        await client.shutdown()


async def test_retry_backoff_after_an_exception_names_it(client: awa.AsyncClient) -> None:
    @client.task(None, kind="smtp", queue="q")
    async def smtp(job: awa.Job[Any]) -> None:
        raise ConnectionError("relay refused the connection\nsecond line")

    await client.start([("q", 2)], **{**LIVE, "promote_interval_ms": 60_000})
    try:
        job = await client.insert({}, kind="smtp", queue="q", max_attempts=3)
        found = await explained(client, job.id, first=C.RETRY_BACKOFF)
        assert "Attempt 1 of 3 failed: ConnectionError: relay refused the connection." in (
            found.reasons[0].message
        )
        assert "second line" not in found.reasons[0].message
    finally:
        await client.shutdown()


# -- due, held back ------------------------------------------------------------------------


async def test_paused_queue_names_who_and_when(client: awa.AsyncClient) -> None:
    register_quick(client)
    await client.pause_queue("q", paused_by="alice")
    await client.start([("q", 2)], **LIVE)
    try:
        await live(client, "q")
        job = await client.insert({}, kind="quick", queue="q")
        found = await client.explain(job.id)
        assert codes(found) == [C.QUEUE_PAUSED]
        message = found.reasons[0].message
        assert "Queue 'q' is paused by alice since " in message
        assert "awa queue resume q" in message
        assert "queue 'q' is paused by alice" in found.summary
    finally:
        await client.shutdown()


async def test_paused_queue_with_no_live_worker_names_both_pause_first(
    client: awa.AsyncClient,
) -> None:
    register_quick(client, queue="other")
    await client.start([("other", 1)], **LIVE)
    try:
        await live(client, "other")
        await client.pause_queue("q")
        job = await client.insert({}, kind="quick", queue="q")
        found = await client.explain(job.id)
        assert codes(found) == [C.QUEUE_PAUSED, C.NO_LIVE_WORKER]
        assert "The 1 live worker process serves 'other'." in found.reasons[1].message
    finally:
        await client.shutdown()


async def test_no_live_worker_says_which_queues_the_live_ones_serve(
    client: awa.AsyncClient,
) -> None:
    register_quick(client, queue="email")

    @client.task(None, kind="report", queue="reports")
    async def report(job: awa.Job[Any]) -> None:
        return None

    await client.start([("email", 1), ("reports", 1)], **LIVE)
    try:
        await live(client, "email")
        job = await client.insert({}, kind="quick", queue="emails")
        found = await client.explain(job.id)
        assert codes(found) == [C.NO_LIVE_WORKER]
        assert "No live worker process serves queue 'emails'." in found.reasons[0].message
        assert "process serves 'email' and 'reports'." in found.reasons[0].message
        details = found.reasons[0].details["live_processes"]
        assert details == [{"host": socket.gethostname(), "pid": os.getpid(),
                            "queues": ["email", "reports"]}]  # fmt: skip
    finally:
        await client.shutdown()


async def test_no_worker_at_all(client: awa.AsyncClient) -> None:
    job = await client.insert({}, kind="k", queue="q")
    found = await client.explain(job.id)
    assert codes(found) == [C.NO_LIVE_WORKER]
    assert "No worker process has reported in the last 30 s" in found.reasons[0].message


async def test_workers_busy_names_the_processes_and_their_permits(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    register_quick(client)
    register_blocking(client, gate)
    await client.start([("q", 2)], **LIVE)
    try:
        # A completion rate for the estimate: ten quick jobs first.
        started = datetime.now(UTC)
        done = await client.insert_many([{} for _ in range(10)], kind="quick", queue="q")
        await wait_for(lambda: _all_completed(client, [j.id for j in done]))
        await client.insert_many([{}, {}], kind="block", queue="q")
        waiting = await client.insert_many([{} for _ in range(4)], kind="quick", queue="q")
        last = waiting[-1]
        found = await explained(client, last.id, first=C.WORKERS_BUSY, contains="holds 2 of 2")
        assert codes(found) == [C.WORKERS_BUSY, C.QUEUED_BEHIND]
        busy, behind = found.reasons
        assert "the database counts 2 running jobs of the queue against 2 permits" in (busy.message)
        assert f"{HERE} holds 2 of 2" in busy.message
        assert busy.details["processes"] == [
            {"host": socket.gethostname(), "pid": os.getpid(), "held": 2, "limit": 2}
        ]
        assert behind.message.startswith("3 jobs of queue 'q' are ahead of it in claim order")
        # The 9 completions after the first, over the time since it (at least 1 s), not
        # all 10 over the whole 5-minute window (0.0333/s: a young queue looked 30 times
        # slower).
        completion = behind.details["completion_rate"]
        since = (datetime.now(UTC) - started).total_seconds()
        assert 9 / max(since, 1.0) <= completion <= 9.0
        assert behind.details["estimated_wait_s"] == pytest.approx(3 / completion, rel=0.01)
        assert re.search(
            r"recent completion rate of \S+/s \(last [^)]+\) they take about", (behind.message)
        )
        assert "all 2 permits for queue 'q' are in use" in found.summary
    finally:
        gate.set()
        await client.shutdown()


async def _all_completed(client: awa.AsyncClient, ids: list[int]) -> bool:
    jobs = [await client.get_job(i) for i in ids]
    return all(j.state is awa.JobState.COMPLETED for j in jobs)


async def _is_running(client: awa.AsyncClient, job_id: int) -> bool:
    return (await client.get_job(job_id)).state is awa.JobState.RUNNING


async def test_queued_behind_counts_higher_priority_jobs_first(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    register_blocking(client, gate)
    register_quick(client)
    await client.start([("q", 1)], **LIVE)
    try:
        held = await client.insert({}, kind="block", queue="q")
        await wait_for(lambda: _is_running(client, held.id))  # the only permit is taken
        mine = await client.insert({}, kind="quick", queue="q", priority=2)
        await client.insert({}, kind="quick", queue="q", priority=3)  # behind it
        await client.insert_many([{}, {}], kind="quick", queue="q", priority=1)  # ahead
        found = await explained(client, mine.id, first=C.WORKERS_BUSY)
        behind = found.reasons[1]
        assert behind.code == C.QUEUED_BEHIND
        assert behind.message.startswith("2 jobs of queue 'q' are ahead of it")
        assert "no job of the queue completed in the last 5 min" in behind.message
        assert behind.details["ahead"] == 2 and behind.details["estimated_wait_s"] is None
    finally:
        gate.set()
        await client.shutdown()


async def test_queued_behind_counts_ordered_jobs_at_their_turn(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    """Ordered jobs whose key's turn has come are claimed in the same order as plain
    ones: they count as ahead; an ordered job still behind its key's first does not."""
    register_blocking(client, gate)
    register_quick(client)
    await client.start([("q", 1)], **LIVE)
    try:
        held = await client.insert({}, kind="block", queue="q")
        await wait_for(lambda: _is_running(client, held.id))  # the only permit is taken
        for key in ("a", "b"):  # each the first of its key: at its turn
            await client.insert({}, kind="quick", queue="q", ordering_key=key)
        await client.insert({}, kind="quick", queue="q", ordering_key="a")  # behind a's first
        mine = await client.insert({}, kind="quick", queue="q")
        found = await explained(client, mine.id, first=C.WORKERS_BUSY)
        behind = found.reasons[1]
        assert behind.code == C.QUEUED_BEHIND and behind.details["ahead"] == 2
    finally:
        gate.set()
        await client.shutdown()


async def test_rate_limited_gives_the_rate_and_the_turn(client: awa.AsyncClient) -> None:
    register_quick(client)
    # One token per 100 s and a burst of one: the first job takes it, the rest wait.
    await client.start([awa.QueueConfig("q", max_workers=4, rate_limit=(0.01, 1))], **LIVE)
    try:
        first = await client.insert({}, kind="quick", queue="q")
        await wait_for(lambda: _all_completed(client, [first.id]))
        jobs = await client.insert_many([{}, {}, {}], kind="quick", queue="q")
        found = await explained(client, jobs[-1].id, first=C.RATE_LIMITED)
        assert codes(found) == [C.RATE_LIMITED, C.QUEUED_BEHIND]
        message = found.reasons[0].message
        assert "Queue 'q' is rate limited to 0.01/s per process, 0.01/s across the 1 live " in (
            message
        )
        assert "a token comes due every 1 min 40 s" in message
        assert "the 2 jobs ahead of it take the next ones" in message
        assert "its turn comes in about 5 min" in message
        assert found.reasons[0].details["turn_in_s"] == pytest.approx(300)
    finally:
        await client.shutdown()


@contextmanager
def claims_skip(database_url: str, ids: list[int]) -> Iterator[None]:
    """Hold row locks on jobs so every claim (FOR UPDATE SKIP LOCKED) passes them by: the
    moment between a job becoming due and a poll claiming it, held still."""
    with psycopg.connect(database_url) as conn, conn.transaction():
        conn.execute("SELECT id FROM awa.jobs WHERE id = ANY(%s) FOR UPDATE", [ids])
        yield


async def test_next_up_when_nothing_holds_it_back(
    client: awa.AsyncClient, database_url: str
) -> None:
    register_quick(client)
    await client.pause_queue("q")
    await client.start([("q", 2)], **LIVE)
    try:
        await live(client, "q")
        job = await client.insert({}, kind="quick", queue="q")
        with claims_skip(database_url, [job.id]):
            await client.resume_queue("q")
            found = await client.explain(job.id)
        assert codes(found) == [C.QUEUED_BEHIND]
        message = found.reasons[0].message
        assert "Nothing is ahead of it in queue 'q' and a live process serving it has a " in (
            message
        )
        assert "its next poll (every 50 ms, or at once when notified) claims it" in message
        assert found.reasons[0].details["ahead"] == 0
        assert "it is next in queue 'q'" in found.summary
    finally:
        await client.shutdown()


async def test_queued_behind_alone_while_free_permits_have_not_claimed_yet(
    client: awa.AsyncClient, database_url: str
) -> None:
    register_quick(client)
    await client.pause_queue("q")
    await client.start([("q", 4)], **LIVE)
    try:
        await live(client, "q")
        jobs = await client.insert_many([{}, {}, {}], kind="quick", queue="q")
        with claims_skip(database_url, [j.id for j in jobs]):
            await client.resume_queue("q")
            found = await client.explain(jobs[-1].id)
        assert codes(found) == [C.QUEUED_BEHIND]
        assert found.reasons[0].message.startswith("2 jobs of queue 'q' are ahead of it")
        assert "2 jobs are ahead of it in queue 'q'" in found.summary
    finally:
        await client.shutdown()


# -- underway and ended ----------------------------------------------------------------------


async def test_running_gives_where_since_heartbeat_and_progress(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    register_blocking(client, gate)
    await client.start([("q", 2)], **LIVE)
    try:
        job = await client.insert({}, kind="block", queue="q")
        found = await explained(client, job.id, first=C.RUNNING, contains="Progress 40%")
        assert codes(found) == [C.RUNNING]
        message = found.reasons[0].message
        assert message.startswith("Running since ")
        assert f"attempt 1 of 25, on {HERE}" in message
        assert "last heartbeat " in message
        assert "Progress 40% (copying rows)." in message
        assert re.search(r"Its deadline is .* \(in (4 min 5\d s|5 min)\)\.", message)
        assert found.reasons[0].details["pid"] == os.getpid()
        assert found.summary.startswith(f"Job {job.id} (block) is running on {HERE} since ")
    finally:
        gate.set()
        await client.shutdown()


async def test_a_job_left_running_by_a_dead_process_is_not_credited_to_a_live_one(
    client: awa.AsyncClient, db: psycopg.Connection[Any], gate: asyncio.Event
) -> None:
    """Claimed a minute ago by a process now gone: the one live process serving the
    queue has published snapshots since, none listing the job, so it is not the runner."""
    register_blocking(client, gate)
    orphan = await client.insert({}, kind="block", queue="q")
    db.execute(
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
        "attempted_at = now() - interval '1 minute', "
        "heartbeat_at = now() + interval '1 hour' WHERE id = %s", (orphan.id,),
    )  # fmt: skip  # a heartbeat ahead: the leader's rescuer leaves it for this test
    await client.start([("q", 2)], **LIVE)
    try:
        found = await explained(client, orphan.id, first=C.RUNNING, contains="none of the")
        message = found.reasons[0].message
        assert "none of the live processes serving queue 'q' runs it" in message
        assert HERE not in message and "pid" not in found.reasons[0].details
    finally:
        gate.set()
        await client.shutdown()


async def test_waiting_external_gives_the_timeout(client: awa.AsyncClient) -> None:
    @client.task(None, kind="external", queue="q")
    async def external(job: awa.Job[Any]) -> awa.WaitForCallback:
        return awa.WaitForCallback(await job.register_callback(timeout_seconds=600))

    await client.start([("q", 1)], **LIVE)
    try:
        job = await client.insert({}, kind="external", queue="q", max_attempts=3)
        found = await explained(client, job.id, first=C.WAITING_EXTERNAL)
        message = found.reasons[0].message
        assert "attempt 1 of 3" in message
        assert "If no callback comes by " in message and "it is retried." in message
        assert "(in 9 min 5" in message or "(in 10 min)" in message
    finally:
        await client.shutdown()


async def test_completed(client: awa.AsyncClient) -> None:
    register_quick(client)
    await client.start([("q", 1)], **LIVE)
    try:
        job = await client.insert({}, kind="quick", queue="q")
        found = await explained(client, job.id, first=C.COMPLETED)
        assert codes(found) == [C.COMPLETED]
        assert "on attempt 1 of 25; the last attempt took " in found.reasons[0].message
        assert found.summary.startswith(f"Job {job.id} (quick) completed at ")
    finally:
        await client.shutdown()


async def test_failed_gives_the_last_error(client: awa.AsyncClient) -> None:
    @client.task(None, kind="bounce", queue="q")
    async def bounce(job: awa.Job[Any]) -> None:
        raise awa.TerminalError("mailbox bob@example.com does not exist")

    await client.start([("q", 1)], **LIVE)
    try:
        job = await client.insert({}, kind="bounce", queue="q")
        found = await explained(client, job.id, first=C.FAILED)
        message = found.reasons[0].message
        assert " on attempt 1 of 25, without retry: TerminalError: mailbox bob@example.com " in (
            message
        )
        assert f"awa job retry {job.id} runs it again." in message
        assert found.reasons[0].details["dead_letter"] is False
    finally:
        await client.shutdown()


async def test_failed_job_in_the_dead_letter_queue_is_found_there(
    client: awa.AsyncClient,
) -> None:
    @client.task(None, kind="bounce", queue="q")
    async def bounce(job: awa.Job[Any]) -> None:
        raise RuntimeError("still broken")

    await client.start([awa.QueueConfig("q", max_workers=1, dlq=True)], **LIVE)
    try:
        job = await client.insert({}, kind="bounce", queue="q", max_attempts=1)
        found = await explained(client, job.id, first=C.FAILED, contains="dead letter")
        message = found.reasons[0].message
        assert " after its only attempt: RuntimeError: still broken." in message
        assert f"awa dlq retry {job.id}" in message
        assert found.reasons[0].details["dead_letter"] is True
    finally:
        await client.shutdown()


async def test_cancelled_gives_the_reason(client: awa.AsyncClient) -> None:
    job = await client.insert({}, kind="k", queue="q")
    await client.cancel(job.id)
    found = await client.explain(job.id)
    assert codes(found) == [C.CANCELLED]
    assert "cancelled by operator" in found.reasons[0].message


# -- the call itself ---------------------------------------------------------------------------


async def test_unknown_and_invalid_ids(client: awa.AsyncClient) -> None:
    with pytest.raises(awa.JobNotFound):
        await client.explain(123456)
    with pytest.raises(awa.ValidationError) as info:
        await client.explain(0)
    assert info.value.field == "id"


async def test_explain_queue_explains_the_oldest_available_job(client: awa.AsyncClient) -> None:
    assert await client.explain_queue("q") is None
    now = datetime.now(UTC)
    oldest = await client.insert({}, kind="k", queue="q", priority=4)
    await client.insert({}, kind="k", queue="q", priority=1)
    await client.insert({}, kind="k", queue="q", run_at=now + timedelta(hours=1))
    found = await client.explain_queue("q")
    assert found is not None and found.job.id == oldest.id
    assert codes(found) == [C.NO_LIVE_WORKER, C.QUEUED_BEHIND]


def test_sync_client_explains_too(sync_client: awa.Client) -> None:
    job = sync_client.insert({}, kind="k", queue="q")
    found = sync_client.explain(job.id)
    assert isinstance(found, awa.Explanation) and found.job.id == job.id
    assert codes(found) == [C.NO_LIVE_WORKER]
    again = sync_client.explain_queue("q")
    assert again is not None and again.job.id == job.id


async def test_a_job_this_fleet_cannot_run_is_handed_back_and_says_by_whom(
    client: awa.AsyncClient,
) -> None:
    """ADR 0027: a process without a handler for the kind hands the job back (scheduled,
    attempt refunded); explain names that process and the kind."""
    register_quick(client)
    await client.start([("q", 1)], **LIVE)
    try:
        job = await client.insert({}, kind="resize_image", queue="q")
        found = await explained(client, job.id, first=C.SCHEDULED, contains="handed back")
        message = found.reasons[0].message
        assert "It was handed back 1 time, without spending an attempt: the last process " in (
            message
        )
        assert f"({HERE}) has no handler for kind 'resize_image'." in message
        assert found.job.attempt == 0
        assert found.summary.startswith(
            f"Job {job.id} (resize_image) was handed back 1 time (no handler for kind "
            f"'resize_image' in {HERE}); it is tried again in "
        )
    finally:
        await client.shutdown()
