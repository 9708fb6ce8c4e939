"""External callbacks on real PostgreSQL: park, resolve from outside, time out."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, wait_for

SLOW_RESCUE = {**FAST_WORKER, "callback_rescue_interval_ms": 50}


async def _state(client: awa.AsyncClient, job_id: int, state: awa.JobState) -> awa.Job[Any]:
    async def reached() -> awa.Job[Any] | None:
        job = await client.get_job(job_id)
        return job if job.state is state else None

    job: awa.Job[Any] = await wait_for(reached)
    return job


def _register(client: awa.AsyncClient, tokens: dict[int, str], timeout: float = 60) -> None:
    @client.task(None, kind="external", queue="q")
    async def external(job: awa.Job[Any]) -> awa.WaitForCallback | None:
        if job.metadata.get("callback_payload") is not None:
            return None  # resumed after retry_external: finish
        token = await job.register_callback(timeout_seconds=timeout)
        tokens[job.id] = token
        return awa.WaitForCallback(token)

    @client.task(None, kind="external_sync", queue="q")
    def external_sync(job: awa.Job[Any]) -> awa.WaitForCallback:
        token = job.register_callback_sync(timeout_seconds=timeout)
        tokens[job.id] = token
        return awa.WaitForCallback(token)


async def test_an_attempt_that_ended_otherwise_shows_no_callback_id(
    client: awa.AsyncClient,
) -> None:
    """The column stays set when the attempt that registered the id returns or raises, but
    the id resolves nothing: shown, it misled (a review)."""

    @client.task(None, kind="registers", queue="q")
    async def registers(job: awa.Job[Any]) -> None:
        await job.register_callback(timeout_seconds=60)
        if job.args["raise"]:
            raise RuntimeError("after registering")

    done = await client.insert({"raise": False}, kind="registers", queue="q")
    failed = await client.insert({"raise": True}, kind="registers", queue="q", max_attempts=1)
    await client.start([("q", 2)], **FAST_WORKER)
    try:
        await _state(client, done.id, awa.JobState.COMPLETED)
        await _state(client, failed.id, awa.JobState.FAILED)
    finally:
        await client.shutdown()
    listed = {j.id: j.callback_id for j in await client.list_jobs(queue="q")}
    assert listed == {done.id: None, failed.id: None}
    assert (await client.get_job(done.id)).callback_id is None


async def test_park_then_complete_fail_retry_and_heartbeat(client: awa.AsyncClient) -> None:
    tokens: dict[int, str] = {}
    _register(client, tokens)
    done = await client.insert({}, kind="external", queue="q")
    failed = await client.insert({}, kind="external_sync", queue="q")
    again = await client.insert({}, kind="external", queue="q")
    await client.start([("q", 3)], **FAST_WORKER)
    try:
        for job in (done, failed, again):
            parked = await _state(client, job.id, awa.JobState.WAITING_EXTERNAL)
            assert parked.finalized_at is None
            assert parked.callback_id == tokens[job.id]  # what resume_external takes
        listed = {j.id: j.callback_id for j in await client.list_jobs(queue="q")}
        assert listed == {job.id: tokens[job.id] for job in (done, failed, again)}
        before = (await client.get_job(done.id)).run_lease
        beat = await client.heartbeat_callback(tokens[done.id], timeout_seconds=120)
        assert beat.state is awa.JobState.WAITING_EXTERNAL and beat.run_lease == before

        completed = await client.complete_external(tokens[done.id], payload={"receipt": 7})
        assert completed.state is awa.JobState.COMPLETED and completed.finalized_at
        assert (await client.get_job(done.id)).callback_id is None
        assert completed.metadata["callback_payload"] == {"receipt": 7}

        failure = await client.fail_external(uuid.UUID(tokens[failed.id]), "card declined")
        assert failure.state is awa.JobState.FAILED
        assert failure.errors[-1] == {**failure.errors[-1], "error": "card declined",
                                      "type": "ExternalFailure"}  # fmt: skip

        first_token = tokens[again.id]
        await client.retry_external(first_token)
        reparked = await _state(client, again.id, awa.JobState.WAITING_EXTERNAL)
        assert reparked.attempt == 2 and tokens[again.id] != first_token
        with pytest.raises(awa.CallbackNotFound):  # the first attempt's token is spent
            await client.complete_external(first_token)
        await client.complete_external(tokens[again.id])
    finally:
        await client.shutdown()
    for token in (tokens[done.id], tokens[failed.id]):  # resolved once, then unknown
        with pytest.raises(awa.CallbackNotFound, match="no job is waiting"):
            await client.retry_external(token)


async def test_unknown_and_malformed_callback_ids(client: awa.AsyncClient) -> None:
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(str(uuid.uuid4()))
    with pytest.raises(awa.CallbackNotFound):
        await client.heartbeat_callback(uuid.uuid4(), timeout_seconds=5)
    with pytest.raises(awa.ValidationError) as info:
        await client.fail_external("not-a-uuid", "x")
    assert info.value.field == "callback_id"
    with pytest.raises(awa.ValidationError):
        await client.heartbeat_callback(uuid.uuid4(), timeout_seconds=0)


async def test_timeout_retries_then_fails_on_the_last_attempt(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    tokens: dict[int, str] = {}
    _register(client, tokens, timeout=0.2)
    job = await client.insert({}, kind="external", queue="q", max_attempts=2)
    await client.start([("q", 1)], **SLOW_RESCUE)
    try:
        failed = await _state(client, job.id, awa.JobState.FAILED)
    finally:
        await client.shutdown()
    assert failed.attempt == 2
    assert [e["type"] for e in failed.errors] == ["CallbackTimeout", "CallbackTimeout"]
    row = db.execute("SELECT callback_id FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
    assert row == (None,)
    with pytest.raises(awa.CallbackNotFound):  # a late callback finds nothing
        await client.complete_external(tokens[job.id])


async def test_callback_arriving_before_the_handler_returns(client: awa.AsyncClient) -> None:
    resolved = asyncio.Event()

    @client.task(None, kind="quick", queue="q")
    async def quick(job: awa.Job[Any]) -> awa.WaitForCallback:
        token = await job.register_callback(timeout_seconds=60)
        await client.complete_external(token, payload="early")
        resolved.set()
        return awa.WaitForCallback(token)

    job = await client.insert({}, kind="quick", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        done = await _state(client, job.id, awa.JobState.COMPLETED)
        await wait_for(lambda: _stale(client))
    finally:
        await client.shutdown()
    assert resolved.is_set() and done.metadata["callback_payload"] == "early"


async def test_a_resume_arriving_before_the_handler_parks_runs_the_job_again(
    client: awa.AsyncClient,
) -> None:
    """``resume_external`` reaches the running job (it stays running, the payload is
    stored, the id is spent); then its handler returns WaitForCallback. Nothing could
    answer the parked job any more, and it had no timeout left: the leader releases it,
    and it runs again with the payload."""
    runs: list[Any] = []

    @client.task(None, kind="early", queue="q")
    async def early(job: awa.Job[Any]) -> awa.WaitForCallback | None:
        runs.append(job.metadata.get("callback_payload"))
        if len(runs) > 1:
            return None
        token = await job.register_callback(timeout_seconds=60)
        resumed = await client.resume_external(token, {"early": True})
        assert resumed.state is awa.JobState.RUNNING
        return awa.WaitForCallback(token)

    job = await client.insert({}, kind="early", queue="q")
    await client.start([("q", 1)], **SLOW_RESCUE)
    try:
        await _state(client, job.id, awa.JobState.COMPLETED)
    finally:
        await client.shutdown()
    assert runs == [None, {"early": True}]


async def test_a_callback_past_its_timeout_is_not_found_before_the_leader_acts(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    tokens: dict[int, str] = {}
    _register(client, tokens)
    job = await client.insert({}, kind="external", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await _state(client, job.id, awa.JobState.WAITING_EXTERNAL)
    finally:
        await client.shutdown()  # no leader from here on: only the deadline decides
    db.execute("UPDATE awa.jobs SET callback_timeout_at = now() - interval '1 second'")
    token = tokens[job.id]
    for answer in (client.complete_external(token), client.fail_external(token, "late"),
                   client.retry_external(token), client.resume_external(token),
                   client.heartbeat_callback(token)):  # fmt: skip
        with pytest.raises(awa.CallbackNotFound):
            await answer
    assert (await client.get_job(job.id)).state is awa.JobState.WAITING_EXTERNAL


async def _stale(client: awa.AsyncClient) -> bool:
    return bool(client._worker.completer.stale >= 1)  # the late WaitForCallback was fenced


async def test_wait_for_callback_without_registering_fails_the_job(
    client: awa.AsyncClient,
) -> None:
    @client.task(None, kind="bad", queue="q")
    async def bad(job: awa.Job[Any]) -> awa.WaitForCallback:
        return awa.WaitForCallback(str(uuid.uuid4()))

    job = await client.insert({}, kind="bad", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        failed = await _state(client, job.id, awa.JobState.FAILED)
    finally:
        await client.shutdown()
    assert failed.errors[-1]["type"] == "CallbackNotRegistered"


async def test_cancel_a_parked_job(client: awa.AsyncClient) -> None:
    tokens: dict[int, str] = {}
    _register(client, tokens)
    job = await client.insert({}, kind="external", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await _state(client, job.id, awa.JobState.WAITING_EXTERNAL)
        assert (await client.cancel(job.id)).state is awa.JobState.CANCELLED
    finally:
        await client.shutdown()
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(tokens[job.id])
    stats = {s.queue: s for s in await client.queue_stats()}
    assert stats["q"].waiting_external == 0 and stats["q"].cancelled == 1


async def test_operator_retry_of_a_parked_job_acts(client: awa.AsyncClient) -> None:
    """Issue 20.6: ``retry(id)`` on a job waiting for its callback makes it available now
    and voids the callback, instead of returning it unchanged."""
    tokens: dict[int, str] = {}
    _register(client, tokens)
    job = await client.insert({}, kind="external", queue="q")
    await client.start([("q", 1)], **SLOW_RESCUE)
    try:
        await _state(client, job.id, awa.JobState.WAITING_EXTERNAL)
    finally:
        # Stopped before the retry, so the retried job stays where we can see it. (A pause
        # is not enough: a claim already under way when the pause commits may take the
        # retried job, whose second attempt then registers a new callback.)
        await client.shutdown()
    retried = await client.retry(job.id)
    assert retried.state is awa.JobState.AVAILABLE
    assert retried.finalized_at is None
    with pytest.raises(awa.CallbackNotFound):  # the old token no longer resolves it
        await client.complete_external(tokens[job.id])
    assert (await client.get_job(job.id)).state is awa.JobState.AVAILABLE


async def test_a_rescued_attempts_callback_does_not_resolve_the_next_attempt(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    from awa.db import sql
    from awa.maintenance import rescuer
    from tests.helpers import lead_maintenance

    job = await client.insert({}, kind="k")
    (run_lease, attempted_at) = db.execute(
        "SELECT run_lease, attempted_at FROM awa.claim('default', 1, 0, 'on')"
    ).fetchone()  # claimed by a worker that then registers a callback...
    token = uuid.uuid4()
    db.execute(
        sql.JOB_REGISTER_CALLBACK,
        {"callback_id": token, "timeout_ms": 60_000, "id": job.id, "run_lease": run_lease,
         "attempted_at": attempted_at},
    )  # fmt: skip
    db.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
               (job.id,))  # fmt: skip
    # ...and dies: the rescuer returns the job, and its next attempt starts.
    rescued = await rescuer.rescue_stale_heartbeats(
        await client._get_pool(), 60_000, lead_maintenance(db)
    )
    assert [r[0] for r in rescued] == [job.id]
    db.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (job.id,))
    db.execute("SELECT * FROM awa.claim('default', 1, 0, 'on')")
    with pytest.raises(awa.CallbackNotFound):
        await client.complete_external(str(token), {"late": True})
    assert (await client.get_job(job.id)).state is awa.JobState.RUNNING


async def test_a_callback_of_an_attempt_that_ended_does_not_resolve_the_next_one(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    from awa.db import sql

    job = await client.insert({}, kind="k")
    (run_lease, attempted_at) = db.execute(
        "SELECT run_lease, attempted_at FROM awa.claim('default', 1, 0, 'on')"
    ).fetchone()
    token = uuid.uuid4()
    db.execute(
        sql.JOB_REGISTER_CALLBACK,
        {"callback_id": token, "timeout_ms": 60_000, "id": job.id, "run_lease": run_lease,
         "attempted_at": attempted_at},
    )  # fmt: skip
    # The handler raised after registering: its outcome is written as a retry, which
    # leaves the job's columns but its state alone, and the next attempt starts.
    db.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (job.id,))
    db.execute("SELECT * FROM awa.claim('default', 1, 0, 'on')")
    answers = [
        lambda: client.complete_external(str(token)),
        lambda: client.fail_external(str(token), "x"),
        lambda: client.resume_external(str(token)),
        lambda: client.retry_external(str(token)),
    ]
    for answer in answers:
        with pytest.raises(awa.CallbackNotFound):
            await answer()
    assert (await client.get_job(job.id)).state is awa.JobState.RUNNING


async def test_a_retry_arriving_before_the_handler_returns_stops_that_handler(
    client: awa.AsyncClient,
) -> None:
    """retry_external made the running job available without telling its worker: claimed
    again by another process, the job ran twice at once for as long as the first handler
    went on (a review). It is now stopped, as by a cancel."""
    stopped = asyncio.Event()
    tokens: list[str] = []

    @client.task(None, kind="slow", queue="q")
    async def slow(job: awa.Job[Any]) -> awa.WaitForCallback:
        tokens.append(await job.register_callback(timeout_seconds=60))
        try:
            await asyncio.sleep(3600)  # still working when the callback comes
        except asyncio.CancelledError:
            stopped.set()
            raise
        return awa.WaitForCallback(tokens[0])

    job = await client.insert({}, kind="slow", queue="q")
    # One permit, held by the first run; heartbeats too far apart to be what stops it.
    slow_beat = {"heartbeat_interval_ms": 60_000, "heartbeat_staleness_ms": 180_000}
    await client.start([("q", 1)], **{**FAST_WORKER, **slow_beat})
    try:
        await wait_for(lambda: _has(tokens))
        retried = await client.retry_external(tokens[0])
        assert retried.id == job.id
        await asyncio.wait_for(stopped.wait(), timeout=20)
    finally:
        await client.shutdown()


async def _has(items: list[Any]) -> bool:
    return bool(items)
