"""Worker lifecycle: pause, shutdown, deadlines, cancellation, heartbeats, stale attempts."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, lead_maintenance, noop_task, wait_for


async def _state(client: awa.AsyncClient, job_id: int, state: awa.JobState) -> awa.Job[Any] | None:
    job = await client.get_job(job_id)
    return job if job.state is state else None


async def _await_state(
    client: awa.AsyncClient, job_id: int, state: awa.JobState, timeout: float = 15.0
) -> awa.Job[Any]:
    job: awa.Job[Any] = await wait_for(lambda: _state(client, job_id, state), timeout=timeout)
    return job


def _worker(client: awa.AsyncClient) -> Any:
    return client._worker  # internal handle, for counters the tests observe


async def test_paused_queue_claims_nothing_until_resumed(client: awa.AsyncClient) -> None:
    ran: list[int] = []

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        ran.append(job.id)

    await client.pause_queue("q", paused_by="test")
    job = await client.insert({"x": 1}, kind="k", queue="q")
    await client.start([("q", 2)], **FAST_WORKER)
    try:
        dispatcher = _worker(client).dispatchers["q"]

        async def idle() -> bool:  # it polled, claimed nothing, and waits for a change
            return dispatcher.idle and dispatcher.polls >= 1

        await wait_for(idle)
        assert ran == [] and (await client.get_job(job.id)).state is awa.JobState.AVAILABLE
        health = await client.health_check()
        assert health.queues["q"].paused
        await client.resume_queue("q")
        await _await_state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert ran == [job.id]


async def test_wait_stopped_returns_when_a_handler_shuts_the_worker_down(
    client: awa.AsyncClient,
) -> None:
    await client.wait_stopped()  # no worker: at once
    stops: list[asyncio.Task[None]] = []

    @client.task(None, kind="stop", queue="q")
    async def stop(job: awa.Job[Any]) -> None:
        stops.append(asyncio.create_task(client.shutdown()))

    await client.start([("q", 2)], **FAST_WORKER)
    waiting = asyncio.create_task(client.wait_stopped())
    await asyncio.sleep(0)
    assert not waiting.done()  # the worker runs
    job = await client.insert({}, kind="stop", queue="q")
    await asyncio.wait_for(waiting, timeout=30)
    assert (await client.get_job(job.id)).state is awa.JobState.COMPLETED
    with pytest.raises(awa.ValidationError):
        client.runtime_snapshot()  # no worker any more


async def _at_least(read: Any, n: int) -> bool:
    return bool(read() >= n)


async def test_shutdown_returns_unfinished_jobs_and_leaves_nothing_running(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    started = asyncio.Event()
    release_sync = threading.Event()

    @client.task(None, kind="hang_async", queue="q")
    async def hang(job: awa.Job[Any]) -> None:
        started.set()
        await asyncio.Event().wait()

    @client.task(None, kind="hang_sync", queue="q")
    def hang_sync(job: awa.Job[Any]) -> None:
        release_sync.wait(30)

    @client.task(None, kind="quick", queue="q")
    async def quick(job: awa.Job[Any]) -> None:
        return None

    a = await client.insert({}, kind="hang_async", queue="q")
    s = await client.insert({}, kind="hang_sync", queue="q")
    q = await client.insert({}, kind="quick", queue="q")
    await client.start([("q", 4)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 15)
    await _await_state(client, q.id, awa.JobState.COMPLETED)
    await wait_for(lambda: _running_count(db, 2))
    await client.shutdown(timeout_ms=200)
    release_sync.set()
    assert db.execute("SELECT count(*) FROM awa.jobs WHERE state = 'running'").fetchone() == (0,)
    for job_id in (a.id, s.id):
        job = await client.get_job(job_id)
        # Fenced to retryable, due now; this process's leader runs until the end of the
        # shutdown and may already have promoted it.
        assert job.state in (awa.JobState.RETRYABLE, awa.JobState.AVAILABLE)
        assert job.run_lease == 2  # claimed (1), then fenced (2)
        assert "shut down" in job.errors[-1]["error"]


async def _running_count(db: psycopg.Connection[Any], n: int) -> bool:
    row = db.execute("SELECT count(*) FROM awa.jobs WHERE state = 'running'").fetchone()
    return row is not None and row[0] == n


async def test_graceful_shutdown_lets_running_handlers_finish(client: awa.AsyncClient) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        started.set()
        await gate.wait()

    job = await client.insert({}, kind="k", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    await asyncio.wait_for(started.wait(), 15)
    shutdown = asyncio.create_task(client.shutdown(timeout_ms=10_000))
    await asyncio.sleep(0)  # let shutdown begin: it must wait for the handler
    assert not shutdown.done()
    gate.set()
    await shutdown
    assert (await client.get_job(job.id)).state is awa.JobState.COMPLETED


async def test_deadline_cancels_async_handler_and_records_the_window(
    client: awa.AsyncClient,
) -> None:
    @client.task(None, kind="slow", queue="q")
    async def slow(job: awa.Job[Any]) -> None:
        await asyncio.Event().wait()

    job = await client.insert({}, kind="slow", queue="q", max_attempts=1)
    await client.start([awa.QueueConfig("q", max_workers=1, deadline_ms=300)], **FAST_WORKER)
    try:
        failed = await _await_state(client, job.id, awa.JobState.FAILED)
    finally:
        await client.shutdown()
    assert failed.errors[-1]["type"] == "DeadlineExceeded"
    assert failed.deadline_at is not None and failed.attempted_at is not None
    assert (failed.deadline_at - failed.attempted_at).total_seconds() == pytest.approx(0.3)


async def test_deadline_flags_sync_handler_which_stops_cooperatively(
    client: awa.AsyncClient,
) -> None:
    noticed = threading.Event()

    @client.task(None, kind="slow_sync", queue="q")
    def slow(job: awa.Job[Any]) -> None:
        while not job.is_cancelled():
            noticed.wait(0.01)
        noticed.set()

    job = await client.insert({}, kind="slow_sync", queue="q")
    await client.start([awa.QueueConfig("q", max_workers=1, deadline_ms=200)], **FAST_WORKER)
    try:
        retried = await _await_state(client, job.id, awa.JobState.RETRYABLE)
    finally:
        await client.shutdown()
    assert noticed.is_set() and retried.errors[-1]["type"] == "DeadlineExceeded"


async def test_the_leader_leaves_an_overdue_job_to_the_worker_that_runs_it(
    client: awa.AsyncClient,
) -> None:
    """The leader's deadline rescue waited one heartbeat interval past the deadline, its
    own worker five seconds before abandoning a plain def that runs on: with short beats
    the leader retried the job first, and it ran again beside its first run (a review:
    an ordering key's next jobs too). The worker's own outcome now comes first."""
    release = threading.Event()

    @client.task(None, kind="blocks", queue="q")
    def blocks(job: awa.Job[Any]) -> None:
        release.wait(30)  # never looks at job.is_cancelled()

    job = await client.insert({}, kind="blocks", queue="q", max_attempts=1)
    await client.start([awa.QueueConfig("q", max_workers=1, deadline_ms=300)], **FAST_WORKER)
    try:
        failed = await _await_state(client, job.id, awa.JobState.FAILED, timeout=30)
    finally:
        release.set()
        await client.shutdown()
    [error] = failed.errors
    assert error["type"] == "DeadlineExceeded"
    assert error["error"].startswith("deadline of 300 ms exceeded (handler abandoned)"), error


async def test_an_async_handler_returning_after_its_deadline_is_cut_short_as_a_sync_one(
    client: awa.AsyncClient,
) -> None:
    """One rule for both kinds: a handler stopped by its deadline did not complete, however
    it ended (an async one that caught the cancellation and returned counted as completed,
    a plain def that returned after the flag as DeadlineExceeded: a review)."""
    caught = asyncio.Event()

    @client.task(None, kind="swallows", queue="q")
    async def swallows(job: awa.Job[Any]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            caught.set()  # and returns as if done

    job = await client.insert({}, kind="swallows", queue="q")
    await client.start([awa.QueueConfig("q", max_workers=1, deadline_ms=200)], **FAST_WORKER)
    try:
        retried = await _await_state(client, job.id, awa.JobState.RETRYABLE)
    finally:
        await client.shutdown()
    assert caught.is_set() and retried.errors[-1]["type"] == "DeadlineExceeded"


async def test_zero_deadline_means_no_deadline(client: awa.AsyncClient) -> None:
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    job = await client.insert({}, kind="k", queue="q")
    await client.start([awa.QueueConfig("q", deadline_ms=0)], **FAST_WORKER)
    try:
        done = await _await_state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert done.deadline_at is None


async def test_cancel_of_a_running_job_stops_its_handler(client: awa.AsyncClient) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()
    sync_started = threading.Event()
    sync_saw_cancel = threading.Event()

    @client.task(None, kind="long", queue="q")
    async def long(job: awa.Job[Any]) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @client.task(None, kind="long_sync", queue="q")
    def long_sync(job: awa.Job[Any]) -> None:
        sync_started.set()
        while not job.is_cancelled():
            sync_saw_cancel.wait(0.01)
        sync_saw_cancel.set()

    job = await client.insert({}, kind="long", queue="q")
    sync_job = await client.insert({}, kind="long_sync", queue="q")
    await client.start([("q", 2)], **FAST_WORKER)
    try:
        await asyncio.wait_for(started.wait(), 15)
        assert await asyncio.to_thread(sync_started.wait, 15)
        assert (await client.cancel(job.id)).state is awa.JobState.CANCELLED
        assert (await client.cancel(sync_job.id)).state is awa.JobState.CANCELLED
        await asyncio.wait_for(cancelled.wait(), 15)
        assert await asyncio.to_thread(sync_saw_cancel.wait, 15)
        permits = _worker(client).dispatchers["q"].permits

        async def permits_back() -> bool:
            return bool(permits.in_flight == 0)

        await wait_for(permits_back)
    finally:
        await client.shutdown()
    for job_id in (job.id, sync_job.id):
        assert (await client.get_job(job_id)).state is awa.JobState.CANCELLED


async def test_stale_attempt_finishing_late_is_not_applied(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    started = asyncio.Event()
    gate = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        started.set()
        await gate.wait()

    job = await client.insert({}, kind="k", queue="q")
    await client.start([("q", 1)], **{**FAST_WORKER, "heartbeat_interval_ms": 60_000,
                                       "heartbeat_staleness_ms": 120_000})  # fmt: skip
    try:
        await asyncio.wait_for(started.wait(), 15)
        # Another process rescued the attempt and a new one took the lease.
        db.execute(
            "UPDATE awa.jobs SET run_lease = run_lease + 1, state = 'running' WHERE id = %s",
            (job.id,),
        )
        completer = _worker(client).completer
        gate.set()
        await wait_for(lambda: _at_least(lambda: completer.stale, 1))
        row = db.execute(
            "SELECT state, run_lease FROM awa.jobs WHERE id = %s", (job.id,)
        ).fetchone()
        assert row == ("running", 2)  # the late completion of lease 1 changed nothing
    finally:
        db.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = %s", (job.id,))
        await client.shutdown()


async def test_heartbeats_refresh_and_silent_jobs_are_rescued(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    gate = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await gate.wait()

    job = await client.insert({}, kind="k", queue="q")
    # A job "claimed" by a process that died: running, with an old heartbeat (one at least
    # after its claim: never heartbeated, it would get its attempt back), last attempt.
    ghost = await client.insert({}, kind="ghost", queue="elsewhere", max_attempts=1)
    orphan = await client.insert({}, kind="ghost", queue="elsewhere", max_attempts=5)
    db.execute(
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
        "heartbeat_at = now() - interval '1 hour', attempted_at = now() - interval '2 hours' "
        "WHERE id = ANY(%s)",
        ([ghost.id, orphan.id],),
    )
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        claimed = await _await_state(client, job.id, awa.JobState.RUNNING)
        initial = db.execute(
            "SELECT heartbeat_at FROM awa.jobs WHERE id = %s", (job.id,)
        ).fetchone()
        assert claimed.attempted_at is not None and initial is not None

        async def beaten() -> bool:
            row = db.execute(
                "SELECT heartbeat_at FROM awa.jobs WHERE id = %s", (job.id,)
            ).fetchone()
            return row is not None and row[0] > initial[0]

        await wait_for(beaten)
        failed = await _await_state(client, ghost.id, awa.JobState.FAILED)
        assert failed.errors[-1]["type"] == "HeartbeatStale" and failed.run_lease == 2
        retried = await _await_state(client, orphan.id, awa.JobState.AVAILABLE)
        assert retried.errors[-1]["type"] == "HeartbeatStale"
        assert (await client.get_job(job.id)).state is awa.JobState.RUNNING  # alive: not rescued
        gate.set()
        await _await_state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()


async def test_a_claim_never_answered_gets_its_attempt_back_once(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A claim commits on the server while its reply is lost with its connection (a
    pooler restarted, a socket cut): no worker runs the job, and it never heartbeats. The
    rescue used up its attempt: with ``max_attempts=1`` it ended failed without having run
    (a review, through a real PgBouncer). Once in a job's life the attempt comes back; a
    second time the rescue counts it, so a job that kills its worker at once still ends."""
    from awa.maintenance import rescuer

    await client.set_queue_limits("lost", concurrency=1)
    job = await client.insert({}, kind="k", queue="lost", max_attempts=1)
    pool = await client._get_pool()
    epoch = lead_maintenance(db)

    def claim_and_lose_the_reply() -> None:
        db.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (job.id,))
        db.execute("SELECT * FROM awa.claim('lost', 1, 0, 'on')")
        db.execute(  # as old as staleness needs, its heartbeat still the claim's own
            "UPDATE awa.jobs SET attempted_at = now() - interval '1 hour', "
            "heartbeat_at = now() - interval '1 hour' WHERE id = %s", (job.id,),
        )  # fmt: skip

    claim_and_lose_the_reply()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN awa_control")
        rescued = await rescuer.rescue_stale_heartbeats(pool, 60_000, epoch)
        notices = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert rescued == [(job.id, "lost", "k", "retryable")]
    assert notices == ['{"freed" : "lost"}']  # its capped queue's slot, as any rescue's
    back = await client.get_job(job.id)
    assert (back.attempt, back.run_lease) == (0, 2)  # the lost claim's lease is fenced
    assert back.errors[-1]["type"] == "NeverHeartbeated"

    claim_and_lose_the_reply()  # the same again: counted this time
    assert await rescuer.rescue_stale_heartbeats(pool, 60_000, epoch) == [
        (job.id, "lost", "k", "failed")
    ]
    ended = await client.get_job(job.id)
    assert (ended.attempt, ended.errors[-1]["type"]) == (1, "HeartbeatStale")


async def test_a_job_given_its_attempt_back_runs(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    from awa.maintenance import promoter, rescuer

    ran = asyncio.Event()

    @client.task(None, kind="once", queue="q")
    async def once(job: awa.Job[Any]) -> None:
        ran.set()

    job = await client.insert({}, kind="once", queue="q", max_attempts=1)
    db.execute("SELECT * FROM awa.claim('q', 1, 0, 'on')")  # its reply lost
    db.execute(
        "UPDATE awa.jobs SET attempted_at = now() - interval '1 hour', "
        "heartbeat_at = now() - interval '1 hour'"
    )
    pool, epoch = await client._get_pool(), lead_maintenance(db)
    await rescuer.rescue_stale_heartbeats(pool, 60_000, epoch)
    assert await promoter.promote_due(pool, epoch) == 1  # the test holds the leader's lease
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        done = await _await_state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert ran.is_set() and done.attempt == 1


async def test_health_and_runtime_registry(client: awa.AsyncClient) -> None:
    idle = await client.health_check()
    assert idle.postgres_connected and not idle.poll_loop_alive and idle.queues == {}
    noop_task(client, queue="a")
    # An idle queue parks free permits in handoff seats (ADR 0045): they count as
    # available (they once did not, and "b" never showed both permits available).
    await client.start([("a", 3), ("b", 2)], **FAST_WORKER)
    try:
        health = await client.health_check()
        assert health.healthy and health.poll_loop_alive and health.heartbeat_alive
        assert health.queues["a"].capacity == awa.HardReserved(3)
        assert health.queues["b"].in_flight == 0

        worker = client._worker
        assert worker is not None

        async def b_settled_with_a_seat() -> bool:  # a claim under way holds permits
            seated = worker.seater.parked().get("b", 0) == 1  # of 2: one stays out
            return seated and (await client.health_check()).queues["b"].available == 2

        await wait_for(b_settled_with_a_seat)
        instances = await wait_for(client.list_runtime_instances)
        (instance,) = instances
        snap = client.runtime_snapshot()
        assert instance.instance_id == snap.instance_id and instance.snapshot is not None
        assert set(instance.snapshot.queues) == {"a", "b"}
        assert instance.snapshot.queues["a"].capacity == awa.HardReserved(3)
        await wait_for(lambda: _leader(client))
    finally:
        await client.shutdown()
    assert await client.list_runtime_instances() == []  # a clean exit deregisters


async def test_any_loop_dead_makes_the_worker_unhealthy_and_is_named(
    client: awa.AsyncClient,
) -> None:
    """health_check() once looked only at the dispatchers and the heartbeat, while
    ``awa health --worker`` failed on any dead loop: one definition now serves both."""
    noop_task(client, queue="a")
    await client.start([("a", 1)], **FAST_WORKER)
    try:
        assert (await client.health_check()).problems == []
        worker = client._worker
        assert worker is not None
        await worker.idle_prober.stop()  # as if its loop had died
        health = await client.health_check()
        assert not health.healthy and health.poll_loop_alive and health.heartbeat_alive
        assert health.problems == ["loops not running: idle-probe"]
    finally:
        await client.shutdown()


async def _leader(client: awa.AsyncClient) -> bool:
    return (await client.health_check()).leader


async def test_start_validates_before_anything_runs(client: awa.AsyncClient) -> None:
    with pytest.raises(awa.DuplicateQueue):
        await client.start([("a", 1), ("a", 2)])
    with pytest.raises(awa.NoQueuesConfigured):
        await client.start()
    with pytest.raises(awa.NoHandlersRegistered):  # checked after the queues
        await client.start([("a", 1)], **FAST_WORKER)
    noop_task(client, queue="a")
    await client.start([("a", 1)], **FAST_WORKER)
    try:
        with pytest.raises(awa.ValidationError, match="already runs"):
            await client.start([("b", 1)])
    finally:
        await client.shutdown()


async def test_a_listen_url_that_cannot_connect_fails_start_naming_it(database_url: str) -> None:
    # Once started, the listener and the leader retry for ever: with a wrong listen_url no
    # process of the fleet could lead (promote, rescue, cron), and health said healthy.
    wrong = psycopg.conninfo.make_conninfo(database_url, dbname="awa_no_such_database")
    client = awa.AsyncClient(database_url, listen_url=wrong)
    noop_task(client)
    try:
        with pytest.raises(awa.DatabaseError, match="cannot connect to listen_url"):
            await client.start([("q", 1)])
        with pytest.raises(awa.ValidationError, match="no worker is running"):
            client.runtime_snapshot()
    finally:
        await client.close()


async def test_a_leader_waits_out_the_staleness_of_the_processes_serving_a_jobs_queue(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Two fleets on one database: this leader rescues after 1 s of silence, a process
    of the other fleet serving queue 'slow' heartbeats every 5 s and allows 20 s. Its
    job, silent for 10 s, is still its; once that process is gone, the leader's own
    staleness applies again."""
    from awa.maintenance import rescuer

    job = await client.insert({}, kind="k", queue="slow")
    db.execute(
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
        "attempted_at = now() - interval '10 seconds', "
        "heartbeat_at = now() - interval '10 seconds' WHERE id = %s", (job.id,),
    )  # fmt: skip
    snapshot = {"queues": {"slow": {}}, "heartbeat_staleness_ms": 20_000}
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at, "
        "last_seen_at, snapshot) VALUES (gen_random_uuid(), 'other-fleet', 1, now(), now(), "
        "%s::jsonb)", (json.dumps(snapshot),),
    )  # fmt: skip
    pool = await client._get_pool()
    epoch = lead_maintenance(db)
    assert await rescuer.rescue_stale_heartbeats(pool, 1_000, epoch) == []
    assert (await client.get_job(job.id)).state is awa.JobState.RUNNING
    db.execute("DELETE FROM awa.runtime_instances")  # that process is gone
    rescued = await rescuer.rescue_stale_heartbeats(pool, 1_000, epoch)
    assert [r[0] for r in rescued] == [job.id]


async def test_health_check_reports_an_unreachable_database() -> None:
    """It raised DatabaseError when the pool could not open (a review)."""
    async with asyncio.timeout(30):
        client = awa.AsyncClient("postgresql://nobody@127.0.0.1:1/nothing")
        try:
            health = await client.health_check()
        finally:
            await client.close()
    assert not health.healthy and not health.postgres_connected
    assert health.problems == ["the database is unreachable"]
