"""Unique keys across the dead letter queue (migration 0031): a dead-lettered job whose
states guard `failed` keeps its key; a retry skips entries whose key a live job holds."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest

import awa
from awa.cli.main import main as cli
from tests.helpers import wait_for

GUARD_FAILED = {"by_args": True, "states": [
    "scheduled", "available", "running", "retryable", "waiting_external", "failed"]}  # fmt: skip


async def _waits_for_a_lock(db: psycopg.Connection[Any], statement: str) -> None:
    """Until a session runs the statement named ``statement`` and waits for a lock."""

    async def waiting() -> bool:
        rows = db.execute(
            "SELECT wait_event_type, left(query, 60) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return any(w == "Lock" and statement in q for w, q in rows)

    await wait_for(waiting)


def _fail_all(db: psycopg.Connection[Any]) -> None:
    """Fail every job as a worker would (the DLQ trigger moves those of dlq=True queues)."""
    db.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now()")


async def test_a_dead_lettered_job_guarding_failed_keeps_its_key(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('pay', true)")
    charge = await client.insert({"order": 7}, kind="charge", queue="pay",
                                 unique_opts=GUARD_FAILED)  # fmt: skip
    other = await client.insert({"order": 8}, kind="charge", queue="pay")  # default states
    _fail_all(db)
    assert {d.job.id for d in await client.list_dlq()} == {charge.id, other.id}

    with pytest.raises(awa.UniqueConflict) as refused:
        await client.insert({"order": 7}, kind="charge", queue="pay", unique_opts=GUARD_FAILED)
    assert refused.value.existing_id == charge.id  # named, though it sits in the DLQ
    with pytest.raises(awa.UniqueConflict):
        await client.insert_many([{"order": 7}], kind="charge", queue="pay",
                                 unique_opts=GUARD_FAILED)  # fmt: skip
    async with client.transaction() as tx:  # refused in its savepoint; the rest commits
        with pytest.raises(awa.UniqueConflict):
            await tx.insert({"order": 7}, kind="charge", queue="pay", unique_opts=GUARD_FAILED)
        kept = await tx.insert({"order": 9}, kind="charge", queue="pay")
    assert (await client.get_job(kept.id)).state is awa.JobState.AVAILABLE
    # The default states do not guard `failed`: the DLQ entry does not hold the key.
    again = await client.insert({"order": 8}, kind="charge", queue="pay")
    assert again.id != other.id

    (retried,) = await client.retry_from_dlq([charge.id])  # its own key: no conflict
    assert retried.id == charge.id and retried.state is awa.JobState.AVAILABLE
    assert await client.purge_dlq(allow_all=True) == 1
    db.execute("DELETE FROM awa.jobs WHERE id = %s", (charge.id,))
    assert (await client.insert({"order": 7}, kind="charge", queue="pay",
                                unique_opts=GUARD_FAILED)).id != charge.id  # fmt: skip


async def test_retry_skips_entries_whose_key_a_live_job_holds(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('q', true)")
    keyed = await client.insert({"n": 1}, kind="boom", queue="q", unique_opts={})
    plain = await client.insert({"n": 2}, kind="boom", queue="q")
    _fail_all(db)
    holder = await client.insert({"n": 1}, kind="boom", queue="q", unique_opts={})

    with caplog.at_level(logging.WARNING, logger="awa"):
        retried = await client.retry_from_dlq(kind="boom")
    assert [j.id for j in retried] == [plain.id]  # not held back by the keyed entry
    assert [d.job.id for d in await client.list_dlq()] == [keyed.id]  # stayed, not lost
    assert f"entry {keyed.id} (key held by job {holder.id})" in caplog.text

    await client.cancel(holder.id)  # cancelled is not a guarded state by default
    (back,) = await client.retry_from_dlq([keyed.id])
    assert back.id == keyed.id and await client.list_dlq() == []


async def test_bulk_guards_take_only_a_real_bool(client: awa.AsyncClient) -> None:
    for stand_in in (None, 0, "no", 1):
        for action in (client.purge_dlq, client.retry_from_dlq, client.move_failed_to_dlq):
            with pytest.raises(awa.ValidationError) as info:
                await action(allow_all=stand_in)
            assert info.value.field == "allow_all"
        with pytest.raises(awa.ValidationError) as info:
            await client.apply_batch(awa.SetPriority(4), allow_all=stand_in)
        assert info.value.field == "allow_all"


def test_cli_points_at_the_dlq_and_checks_its_filters(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('a', true)")
        with awa.Client(database_url) as client:
            job = client.insert({}, kind="k", queue="a")
        _fail_all(db)
    base = ["--database-url", database_url]
    assert cli([*base, "job", "get", str(job.id)]) == 1
    assert f"awa dlq get {job.id}" in capsys.readouterr().err
    for action in ("retry", "cancel"):  # a review: these said only "not found"
        assert cli([*base, "job", action, str(job.id)]) == 1
        assert f"awa dlq retry {job.id} runs it again" in capsys.readouterr().err
    assert cli([*base, "job", "get", str(job.id + 1000)]) == 1
    assert "dead letter" not in capsys.readouterr().err
    assert cli([*base, "dlq", "move"]) == 2
    err = capsys.readouterr().err
    assert "--kind or --queue" in err and "--older-than" not in err  # move has no age
    assert cli([*base, "dlq", "depth", "--queue", ""]) == 2
    assert "--queue" in capsys.readouterr().err


async def test_an_entry_whose_key_another_entry_guards_stays_and_the_rest_go(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A (default states) dead-lettered, then B with the same key guarding `failed` too:
    a bulk retry raised an unnamed UniqueConflict and retried nothing (a review)."""
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('pay', true)")
    a = await client.insert({"order": 7}, kind="charge", queue="pay", unique_opts={})
    _fail_all(db)
    b = await client.insert({"order": 7}, kind="charge", queue="pay", unique_opts=GUARD_FAILED)
    p = await client.insert({"order": 8}, kind="charge", queue="pay")
    _fail_all(db)
    with caplog.at_level(logging.WARNING, logger="awa"):
        retried = await client.retry_from_dlq(kind="charge")
    assert sorted(j.id for j in retried) == [b.id, p.id]
    assert [d.job.id for d in await client.list_dlq()] == [a.id]
    assert f"entry {a.id} (key held by job {b.id})" in caplog.text


async def test_a_retry_waits_for_a_purge_of_the_same_entry_and_finds_it_gone(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The retry read the entry before taking it: a purge committing meanwhile reported
    it deleted while the retry brought it back (a review). Deleting first locks it."""
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('q', true)")
    job = await client.insert({}, kind="k", queue="q")
    _fail_all(db)
    with psycopg.connect(database_url) as purger:  # one open transaction
        purged = purger.execute("DELETE FROM awa.dlq WHERE id = %s", (job.id,))
        assert purged.rowcount == 1
        retry = asyncio.create_task(client.retry_from_dlq([job.id]))

        await _waits_for_a_lock(db, "dlq_retry")
        purger.commit()
    assert await retry == []
    with pytest.raises(awa.JobNotFound):
        await client.get_job(job.id)


async def test_a_purge_ended_by_a_deadlock_runs_again(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Two bulk DLQ statements (or one and the pruner) visiting shared entries in
    different orders deadlock; PostgreSQL ends the one that waited first — here the
    purge — and the purge runs again instead of failing."""
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('q', true)")
    ids = [(await client.insert({"n": n}, kind="k", queue="q")).id for n in range(3)]
    _fail_all(db)
    other = await psycopg.AsyncConnection.connect(database_url)  # one open transaction
    try:
        await other.execute("DELETE FROM awa.dlq WHERE id = %s", (ids[1],))
        purge = asyncio.create_task(client.purge_dlq(ids))  # takes ids[0], waits for ids[1]

        await _waits_for_a_lock(db, "dlq_purge")
        # Now the other transaction waits for ids[0]: a cycle, and the purge waited first.
        await other.execute("DELETE FROM awa.dlq WHERE id = %s", (ids[0],))
        await other.commit()
        assert await purge == 1  # ids[2]; the other two were the other transaction's
    finally:
        await other.close()
    assert await client.list_dlq() == []


async def test_a_retry_beside_a_dead_letter_guarding_its_key_is_refused_naming_it(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """retry(id) is an update, which neither jobs_unique_idx (awa.jobs only) nor the
    DLQ's insert check sees: the job ran beside its dead-lettered twin, while
    retry_failed refused the same job (a review)."""
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('pay', true)")
    first = await client.insert({"order": 7}, kind="charge", queue="plain",
                                unique_opts={"by_args": True})  # fmt: skip
    _fail_all(db)  # failed, where the default states do not guard its key
    dead = await client.insert({"order": 7}, kind="charge", queue="pay", unique_opts=GUARD_FAILED)
    db.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = %s",
               (dead.id,))  # fmt: skip
    assert [d.job.id for d in await client.list_dlq()] == [dead.id]

    with pytest.raises(awa.UniqueConflict) as refused:
        await client.retry(first.id)
    assert refused.value.existing_id == dead.id
    assert (await client.get_job(first.id)).state is awa.JobState.FAILED
    assert await client.retry_failed(kind="charge") == []
    await client.purge_dlq([dead.id])  # the key is free: the retry goes through
    assert (await client.retry(first.id)).state is awa.JobState.AVAILABLE


async def test_a_key_taken_while_the_bulk_retry_runs_fails_none_of_it(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """The retry skips keys held as it starts; one inserted while it ran failed all of it
    (a review: 200 000 jobs, one producer's insert, nothing retried)."""
    taken = await client.insert({"order": 7}, kind="charge", queue="plain",
                                unique_opts={"by_args": True})  # fmt: skip
    other = await client.insert({"order": 8}, kind="charge", queue="plain")
    _fail_all(db)
    async with client.transaction() as tx:  # the key taken, not yet committed
        holder = await tx.insert({"order": 7}, kind="charge", queue="plain",
                                 unique_opts={"by_args": True})  # fmt: skip
        retrying = asyncio.create_task(client.retry_failed(kind="charge"))
        await _waits_for_a_lock(db, "-- job_retry_failed")  # on the key, behind this insert
    retried = await retrying
    assert [j.id for j in retried] == [other.id]
    assert (await client.get_job(taken.id)).state is awa.JobState.FAILED
    assert (await client.get_job(holder.id)).state is awa.JobState.AVAILABLE
