"""Admin operations: listing, cancel, retry, bulk retry/discard, pause/resume, drain, stats."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import awa
from awa.types import CANCEL_APPLIES_TO, RETRY_APPLIES_TO
from tests.helpers import skewed_datetime, wait_for


async def _fail(db: psycopg.Connection[Any], job_id: int) -> None:
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', attempt = max_attempts, finalized_at = now() "
        "WHERE id = %s",
        (job_id,),
    )


async def test_get_job_missing_raises_job_not_found(client: awa.AsyncClient) -> None:
    with pytest.raises(awa.JobNotFound):
        await client.get_job(999_999)
    with pytest.raises(awa.ValidationError, match="id"):
        await client.get_job(0)


async def test_list_jobs_is_newest_first_and_filtered(client: awa.AsyncClient) -> None:
    a = await client.insert({"n": 1}, kind="a", queue="q1")
    b = await client.insert({"n": 2}, kind="b", queue="q2")
    c = await client.insert({"n": 3}, kind="a", queue="q2")
    assert [j.id for j in await client.list_jobs()] == [c.id, b.id, a.id]
    assert [j.id for j in await client.list_jobs(kind="a")] == [c.id, a.id]
    assert [j.id for j in await client.list_jobs(queue="q2", kind="a")] == [c.id]
    assert [j.id for j in await client.list_jobs(state="available", limit=1)] == [c.id]
    assert await client.list_jobs(state=awa.JobState.FAILED) == []


async def test_list_jobs_honours_large_limits(client: awa.AsyncClient) -> None:
    await client.insert_many([{"i": i} for i in range(1_200)], kind="k")
    assert len(await client.list_jobs(limit=10_000)) == 1_200
    with pytest.raises(awa.ValidationError, match="limit"):
        await client.list_jobs(limit=10_001)
    with pytest.raises(awa.ValidationError, match="state"):
        await client.list_jobs(state="bogus")


async def test_job_summaries_list_the_same_jobs_without_their_payload(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    a = await client.insert({"n": 1}, kind="a", queue="q1", tags=["t"], priority=3)
    b = await client.insert({"n": 2}, kind="b", queue="q2", ordering_key="k")
    await client.cancel(a.id)
    db.execute(
        'UPDATE awa.jobs SET errors = errors || \'[{"error": "second"}]\' WHERE id = %s',
        (a.id,),
    )
    for filters in ({}, {"kind": "a"}, {"queue": "q2"}, {"state": "cancelled", "limit": 1}):
        jobs = await client.list_jobs(**filters)
        summaries = await client.list_job_summaries(**filters)
        assert [s.id for s in summaries] == [j.id for j in jobs]
    [sa, sb] = sorted(await client.list_job_summaries(), key=lambda s: s.id)
    assert sb.id == b.id
    ja = await client.get_job(a.id)
    assert (sa.kind, sa.queue, sa.state, sa.priority, sa.tags, sa.attempt, sa.max_attempts) == (
        "a",
        "q1",
        awa.JobState.CANCELLED,
        3,
        ["t"],
        ja.attempt,
        ja.max_attempts,
    )
    assert (sa.created_at, sa.run_at, sa.finalized_at) == (
        ja.created_at,
        ja.run_at,
        ja.finalized_at,
    )
    assert sa.last_error == "second"  # the newest of the job's errors
    assert (sb.last_error, sb.ordering_key, sb.state) == (None, "k", awa.JobState.AVAILABLE)
    assert not hasattr(sa, "args")
    with pytest.raises(awa.ValidationError, match="limit"):
        await client.list_job_summaries(limit=10_001)


async def test_job_summaries_never_read_args_metadata_or_progress(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Proved by a role that may read every column of awa.jobs but those three: a listing
    of jobs with megabytes of args must not fetch (nor detoast) them."""
    if not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
        pytest.skip("the test server's role cannot create roles")
    db.execute("INSERT INTO awa.jobs (kind, queue, args) VALUES ('k', 'q', '{\"big\": 1}')")
    role, password = f"lister_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    columns = [
        name
        for (name,) in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'awa.jobs'::regclass "
            "AND attnum > 0 AND NOT attisdropped "
            "AND attname NOT IN ('args', 'metadata', 'progress')"
        )
    ]
    db.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")  # test-only names
    try:
        db.execute(f"GRANT USAGE ON SCHEMA awa TO {role}")
        db.execute(f"GRANT SELECT ({', '.join(columns)}) ON awa.jobs TO {role}")
        url = conninfo.make_conninfo(database_url, user=role, password=password)
        async with awa.AsyncClient(url) as lister:
            [summary] = await lister.list_job_summaries()
            assert (summary.kind, summary.queue) == ("k", "q")
            with pytest.raises(awa.DatabaseError, match="InsufficientPrivilege"):  # args too
                await lister.list_jobs()
    finally:
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


async def test_cancel_and_retry_round_trip(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    job = await client.insert({"x": 1}, kind="k", max_attempts=1)
    cancelled = await client.cancel(job.id)
    assert cancelled.state is awa.JobState.CANCELLED and cancelled.finalized_at is not None
    assert cancelled.errors[-1]["error"] == "cancelled by operator"
    assert (await client.cancel(job.id)).state is awa.JobState.CANCELLED  # idempotent
    await _fail(db, job.id)
    retried = await client.retry(job.id)
    assert retried.state is awa.JobState.AVAILABLE and retried.finalized_at is None
    assert retried.max_attempts == 2  # exhausted budget widened so the retry can run
    with pytest.raises(awa.JobNotFound):
        await client.cancel(123_456)


@pytest.mark.parametrize("action", ["cancel", "retry"])
async def test_the_states_each_action_applies_to_are_the_ones_it_changes(
    client: awa.AsyncClient, db: psycopg.Connection[Any], action: str
) -> None:
    """The CLI and the dashboard offer cancel and retry only for the states in
    awa.types.CANCEL_APPLIES_TO / RETRY_APPLIES_TO: those must be exactly the states the
    statements change."""
    applies = {"cancel": CANCEL_APPLIES_TO, "retry": RETRY_APPLIES_TO}[action]
    changed = set()
    for state in awa.JobState:
        job = await client.insert({"state": state.value}, kind="k")
        db.execute(
            "UPDATE awa.jobs SET state = %s, attempt = 1, attempted_at = now(),"
            " heartbeat_at = now(), finalized_at = CASE WHEN %s THEN now() END WHERE id = %s",
            (state.value, state.value in ("completed", "failed", "cancelled"), job.id),
        )
        before = db.execute("SELECT xmin::text FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
        await getattr(client, action)(job.id)
        after = db.execute("SELECT xmin::text FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
        if after != before:
            changed.add(state)
    assert changed == set(applies)


async def test_retry_failed_and_discard_failed(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    jobs = [await client.insert({"i": i}, kind="k" if i < 3 else "other") for i in range(5)]
    for job in jobs:
        await _fail(db, job.id)
    with pytest.raises(awa.ValidationError):
        await client.retry_failed()
    retried = await client.retry_failed(kind="k")
    assert sorted(j.id for j in retried) == [j.id for j in jobs[:3]]
    assert all(j.state is awa.JobState.AVAILABLE for j in retried)
    assert await client.discard_failed("other") == 2
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (3,)


async def test_retry_failed_leaves_a_job_whose_unique_key_is_taken_and_retries_the_rest(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """One failed job whose key a later job holds failed the whole bulk retry (no job
    retried, a UniqueConflict naming neither); a single retry named no holder."""
    unique = {"by_args": True}  # the default states: `failed` is not guarded
    taken = await client.insert({"n": 1}, kind="charge", queue="pay", unique_opts=unique)
    plain = await client.insert({"n": 2}, kind="charge", queue="pay")
    twin = await client.insert({"n": 3}, kind="charge", queue="pay", unique_opts=unique)
    for job in (taken, plain, twin):
        await _fail(db, job.id)
    # Taken since it failed; and a second failed job with the key of `twin`.
    later = datetime.now().astimezone() + timedelta(hours=1)
    holder = await client.insert({"n": 1}, kind="charge", queue="pay", unique_opts=unique,
                                 run_at=later)  # fmt: skip
    twin_again = await client.insert({"n": 3}, kind="charge", queue="pay", unique_opts=unique)
    await _fail(db, twin_again.id)

    with pytest.raises(awa.UniqueConflict) as refused:
        await client.retry(taken.id)
    assert refused.value.existing_id == holder.id
    with caplog.at_level("WARNING", logger="awa"):
        retried = await client.retry_failed(kind="charge")
    assert sorted(j.id for j in retried) == [plain.id, twin.id]  # the first of a key only
    assert (await client.get_job(taken.id)).state is awa.JobState.FAILED
    assert (await client.get_job(twin_again.id)).state is awa.JobState.FAILED
    assert f"job {taken.id} (key held by job {holder.id})" in caplog.text
    assert f"job {twin_again.id} (key held by job {twin.id})" in caplog.text
    await client.cancel(holder.id)  # the key is free again: the count form retries it
    assert await client._retry_failed_count(kind="charge") == 1


async def test_a_long_list_of_jobs_left_failed_says_how_many_it_leaves_out(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    unique = {"by_args": True}
    jobs = await client.insert_many([{"n": n} for n in range(22)], kind="charge",
                                    unique_opts=unique)  # fmt: skip
    db.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")
    later = datetime.now().astimezone() + timedelta(hours=1)
    await client.insert_many([{"n": n} for n in range(22)], kind="charge", unique_opts=unique,
                             run_at=later)  # fmt: skip
    with caplog.at_level("WARNING", logger="awa"):
        assert await client.retry_failed(kind="charge") == []
    assert f"job {jobs[19].id} (key held by job" in caplog.text
    assert f"job {jobs[20].id} " not in caplog.text and " and 2 more failed" in caplog.text


async def test_pause_resume_drain_and_stats(client: awa.AsyncClient) -> None:
    await client.insert_many([{"i": i} for i in range(4)], kind="k", queue="q")
    await client.insert({"x": 1}, kind="k", queue="other")
    await client.pause_queue("q", paused_by="ops")
    stats = {s.queue: s for s in await client.queue_stats()}
    assert stats["q"].paused and stats["q"].available == 4 and not stats["other"].paused
    assert stats["q"].lag_seconds is not None and stats["q"].lag_seconds >= 0
    await client.resume_queue("q")
    assert not {s.queue: s for s in await client.queue_stats()}["q"].paused
    assert await client.drain_queue("q") == 4
    q = {s.queue: s for s in await client.queue_stats()}["q"]
    assert (q.available, q.cancelled, q.completed, q.lag_seconds) == (0, 4, 0, None)


async def test_completions_of_the_last_minute_and_hour(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """completed_last_minute is a rate the pruner cannot bend: completions finalized in
    the minute, where differences of the retained ``completed`` count went negative."""
    await client.insert_many([{"i": i} for i in range(6)], kind="k", queue="q")
    db.execute(
        "UPDATE awa.jobs SET state = 'completed', attempt = 1, attempted_at = now(), "
        "finalized_at = now() - (id % 3) * interval '40 minutes' WHERE queue = 'q'"
    )  # two now, two 40 minutes ago, two 80 minutes ago
    [q] = await client.queue_stats()
    assert (q.completed, q.completed_last_hour, q.completed_last_minute) == (6, 4, 2)


async def test_paused_queue_without_jobs_still_appears(client: awa.AsyncClient) -> None:
    await client.pause_queue("empty")
    stats = await client.queue_stats()
    assert [(s.queue, s.paused, s.available) for s in stats] == [("empty", True, 0)]


async def test_resuming_a_queue_never_paused_leaves_no_trace(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.resume_queue("typo")  # nothing to resume: not an error, and no row
    assert await client.queue_stats() == []
    assert db.execute("SELECT count(*) FROM awa.queue_meta").fetchone() == (0,)


async def test_sync_client_shares_the_behaviour(sync_client: awa.Client) -> None:
    job = sync_client.insert({"x": 1}, kind="k")
    assert sync_client.get_job(job.id) == job
    many = sync_client.insert_many([{"i": 1}, {"i": 2}], kind="k")
    assert len(many) == 2
    with sync_client.transaction() as tx:
        tx.insert({"y": 1}, kind="k")
        assert tx.fetch_one("SELECT count(*) AS n FROM awa.jobs")["n"] == 4
    with pytest.raises(ZeroDivisionError), sync_client.transaction() as tx:
        tx.insert({"z": 1}, kind="k")
        raise ZeroDivisionError
    assert len(sync_client.list_jobs()) == 4
    with pytest.raises(awa.ValidationError):
        sync_client.insert({"x": 1}, kind="k", priority=0)


async def test_a_blank_queue_an_older_version_let_in_can_be_found_and_cleared(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """New blank names are refused; one already stored can still be looked at, paused,
    drained and moved from (only names given to something new are checked)."""
    db.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', '   ')")
    assert [j.queue for j in await client.list_jobs(queue="   ")] == ["   "]
    assert await client.queue_runtime_overrides("   ") is None
    await client.pause_queue("   ")
    await client.resume_queue("   ")
    assert await client.drain_queue("   ") == 1
    with pytest.raises(awa.ValidationError, match="blank"):
        await client.insert({}, kind="k", queue="   ")


_HostBehind = skewed_datetime(-timedelta(minutes=10))  # a host 10 minutes behind the database
_HostAhead = skewed_datetime(timedelta(minutes=5))  # one 5 minutes ahead


async def test_a_workers_start_is_by_the_databases_clock(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on a host 5 minutes fast stored its start in the future: `awa job explain`
    called its running jobs orphaned until its next report (a review of skewed hosts)."""
    import awa.worker.runtime

    monkeypatch.setattr(awa.worker.runtime, "datetime", _HostAhead)
    client.task(None, kind="k", queue="q")(lambda job: None)
    await client.start(["q"])
    try:
        (instance,) = await wait_for(client.list_runtime_instances)  # its first report
        (now,) = db.execute("SELECT now()").fetchone() or (None,)
        assert instance.started_at <= now
    finally:
        await client.shutdown()


async def test_a_workers_age_is_by_the_databases_clock(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`awa runtime list` and the dashboard's ok/late badge took a worker's age from the
    reader's clock: on a host 10 minutes behind, a dead worker read as seen 0 s ago, "ok"
    (a review of skewed hosts)."""
    import awa.dashboard.views
    from awa.dashboard.views import instance_health

    monkeypatch.setattr(awa.dashboard.views, "datetime", _HostBehind)

    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,"
        " last_seen_at) VALUES (gen_random_uuid(), 'h', 1, now() - interval '1 hour',"
        " now() - interval '40 seconds')"
    )
    (instance,) = await client.list_runtime_instances()
    assert 40 <= instance.seen_ago_s < 60
    assert instance_health(instance) == "late"
