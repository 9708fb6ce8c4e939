"""The dead letter queue on real PostgreSQL: the move is atomic with the failure, round
trip back to available, filters, refusal of unfiltered bulk actions, retention, CLI."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa.cli.main import main as cli
from awa.maintenance import pruner
from tests.helpers import FAST_WORKER, lead_maintenance, noop_task, wait_for


async def _dead(client: awa.AsyncClient, n: int, **filters: Any) -> list[awa.DeadLetter]:
    async def enough() -> list[awa.DeadLetter] | None:
        dead = await client.list_dlq(**filters)
        return dead if len(dead) >= n else None

    found: list[awa.DeadLetter] = await wait_for(enough)
    return found


async def test_round_trip_failed_job_moves_to_dlq_and_retries_with_fresh_budget(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    attempts: list[int] = []
    fail = [True]

    @client.task(None, kind="flaky", queue="q")
    async def flaky(job: awa.Job[Any]) -> None:
        attempts.append(job.attempt)
        if fail[0]:
            raise ValueError("downstream is down")

    @client.task(None, kind="fatal", queue="q")
    async def fatal(job: awa.Job[Any]) -> None:
        raise awa.TerminalError("bad input")

    exhausted = await client.insert({"n": 1}, kind="flaky", queue="q", max_attempts=1)
    terminal = await client.insert({"n": 2}, kind="fatal", queue="q", max_attempts=5)
    await client.start([awa.QueueConfig("q", max_workers=2, dlq=True)], **FAST_WORKER)
    try:
        dead = await _dead(client, 2)
        by_id = {d.job.id: d for d in dead}
        assert set(by_id) == {exhausted.id, terminal.id}
        assert by_id[exhausted.id].reason == "downstream is down"
        assert by_id[terminal.id].reason == "bad input"
        assert by_id[exhausted.id].job.state is awa.JobState.FAILED
        assert by_id[exhausted.id].job.errors[-1]["type"] == "ValueError"
        rows = db.execute("SELECT count(*) FROM awa.jobs WHERE kind IN ('flaky', 'fatal')")
        assert rows.fetchone() == (0,)  # moved, not copied
        with pytest.raises(awa.JobNotFound):
            await client.get_job(exhausted.id)

        fail[0] = False
        (retried,) = await client.retry_from_dlq(exhausted.id)  # one id, or a list
        assert retried.id == exhausted.id and retried.attempt == 0
        assert retried.state is awa.JobState.AVAILABLE and len(retried.errors) == 1

        async def completed() -> bool:
            return (await client.get_job(exhausted.id)).state is awa.JobState.COMPLETED

        await wait_for(completed)
    finally:
        await client.shutdown()
    assert attempts == [1, 1]  # a fresh budget: attempt 1 again
    assert [d.job.id for d in await client.list_dlq()] == [terminal.id]


async def test_queues_without_dlq_keep_failed_jobs(client: awa.AsyncClient) -> None:
    @client.task(None, kind="boom", queue="plain")
    async def boom(job: awa.Job[Any]) -> None:
        raise awa.TerminalError("no")

    job = await client.insert({}, kind="boom", queue="plain")
    await client.start([("plain", 1)], **FAST_WORKER)
    try:

        async def failed() -> bool:
            return (await client.get_job(job.id)).state is awa.JobState.FAILED

        await wait_for(failed)
    finally:
        await client.shutdown()
    assert await client.list_dlq() == []


async def test_a_worker_that_does_not_state_the_dlq_leaves_it_on(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """`awa worker --queue payments=2` (no way to say dlq) turned the DLQ another process
    had turned on off for the whole fleet: failed jobs stayed in awa.jobs (a review)."""
    noop_task(client, "payments")

    def stored() -> bool:
        row = db.execute("SELECT dlq FROM awa.queue_meta WHERE queue = 'payments'").fetchone()
        return bool(row and row[0])

    for queues, expected in (([awa.QueueConfig("payments", dlq=True)], True),
                             ([("payments", 2)], True),  # not stated: as stored
                             ([{"name": "payments", "max_workers": 2}], True),
                             ([awa.QueueConfig("payments", dlq=False)], False)):  # fmt: skip
        await client.start(queues, **FAST_WORKER)
        await client.shutdown()
        assert stored() is expected, queues


async def test_rescued_last_attempt_is_dead_lettered_too(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ghost = await client.insert({}, kind="ghost", queue="q", max_attempts=1)
    db.execute(  # heartbeated once after its claim (never, it would get its attempt back)
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
        "heartbeat_at = now() - interval '1 hour', attempted_at = now() - interval '2 hours' "
        "WHERE id = %s",
        (ghost.id,),
    )
    noop_task(client)
    await client.start([awa.QueueConfig("q", max_workers=1, dlq=True)], **FAST_WORKER)
    try:
        (dead,) = await _dead(client, 1)
    finally:
        await client.shutdown()
    assert dead.job.id == ghost.id and dead.job.errors[-1]["type"] == "HeartbeatStale"


async def _seed(db: psycopg.Connection[Any], client: awa.AsyncClient) -> list[int]:
    """Dead-letter four jobs directly through the trigger (no worker needed)."""
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('a', true), ('b', true)")
    ids = []
    for kind, queue in [("x", "a"), ("x", "b"), ("y", "a"), ("y", "b")]:
        job = await client.insert({"k": kind}, kind=kind, queue=queue)
        db.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = %s",
                   (job.id,))  # fmt: skip
        ids.append(job.id)
    return ids


async def test_filters_and_the_empty_filter_guard(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _seed(db, client)
    assert len(await client.list_dlq()) == 4
    assert {d.job.id for d in await client.list_dlq(kind="x")} == {ids[0], ids[1]}
    assert {d.job.id for d in await client.list_dlq(queue="a", kind="y")} == {ids[2]}
    assert await client.list_dlq(older_than=timedelta(hours=1)) == []
    for action in (client.retry_from_dlq, client.purge_dlq):
        with pytest.raises(awa.ValidationError, match="allow_all") as info:
            await action()
        assert info.value.field == "filter"
    with pytest.raises(awa.ValidationError):
        await client.list_dlq(limit=0)
    assert await client.purge_dlq(kind="x", queue="a") == 1
    db.execute("UPDATE awa.dlq SET dlq_at = now() - interval '2 days' WHERE id = %s", (ids[1],))
    assert await client.purge_dlq(older_than=86_400) == 1  # seconds, or a timedelta
    retried = await client.retry_from_dlq(allow_all=True)
    assert sorted(j.id for j in retried) == ids[2:]
    assert await client.list_dlq() == []


async def test_retention_prunes_old_dead_letters(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _seed(db, client)
    db.execute("UPDATE awa.dlq SET dlq_at = now() - interval '31 days' WHERE id = ANY(%s)",
               (ids[:3],))  # fmt: skip
    pruned = await pruner.prune_dlq(
        await client._get_pool(), 30 * 24 * 3_600_000, lead_maintenance(db)
    )
    assert pruned == 3 and [d.job.id for d in await client.list_dlq()] == [ids[3]]


def test_dlq_cli(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('a', true)")
        with awa.Client(database_url) as client:
            jobs = [client.insert({"i": i}, kind="k", queue="a") for i in range(3)]
        db.execute("UPDATE awa.jobs SET state = 'failed'")
    base = ["--database-url", database_url, "dlq"]
    assert cli([*base, "list", "--json"]) == 0
    assert capsys.readouterr().out.count('"reason"') == 3
    assert cli([*base, "retry"]) == 2  # no filter, no --all: refused
    assert "argument --all" in capsys.readouterr().err  # names the flag
    assert cli([*base, "retry", str(jobs[0].id)]) == 0
    assert "retried 1 job(s)" in capsys.readouterr().out
    assert cli([*base, "purge", "--older-than", "1h"]) == 0
    assert "purged 0 job(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        cli([*base, "purge", "--older-than", "soon"])
    assert bad.value.code == 2 and "--older-than" in capsys.readouterr().err
    assert cli([*base, "purge", "--all"]) == 0
    assert "purged 2 job(s)" in capsys.readouterr().out


def test_the_blocking_client_has_every_feature_method(sync_client: awa.Client) -> None:
    assert sync_client.list_dlq() == [] and sync_client.purge_dlq(allow_all=True) == 0
    assert sync_client.retry_from_dlq(kind="k") == []
    assert sync_client.list_cron_schedules() == []
    with pytest.raises(awa.ScheduleNotFound):
        sync_client.trigger_cron("nope")
    with pytest.raises(awa.CallbackNotFound):
        sync_client.complete_external("00000000-0000-0000-0000-000000000000")
    seen: list[str] = []
    sync_client.on_event("completed", lambda e: seen.append(e.name))
    sync_client.periodic("p", "@hourly", {}, kind="k")
