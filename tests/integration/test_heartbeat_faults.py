"""Heartbeats that meet a passing fault stop no handler of a healthy worker (the lease
limit, ADR 0055, at two intervals by default: reviews found each of these stopping every
handler of the process, a job on its last attempt ending failed):

* one beat lost to an error (a deadlock victim, a cancelled statement) is tried again
  within a second, not an interval later;
* a job row another transaction holds is skipped by the beat and by the progress writer,
  not waited for (waiting, the writer kept every row below it locked and the beat
  confirmed none of them), and reported held: neither confirmed nor lost.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
from awa.worker import heartbeat, progress
from awa.worker.attempt import Attempt
from tests.helpers import FAST_WORKER, wait_for
from tests.unit.fakes import FakePermit

# The default ratio of interval to staleness (30 s : 90 s), thirty times faster.
SETTINGS = {**FAST_WORKER, "heartbeat_interval_ms": 1_000, "heartbeat_staleness_ms": 3_000}

FAIL_THE_SECOND_BEAT = """
CREATE SEQUENCE public.beats;
CREATE FUNCTION public.fail_second_beat() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('public.beats') = 2 THEN  -- a sequence: the failure does not roll it back
        RAISE EXCEPTION 'injected: one heartbeat fails' USING ERRCODE = '40P01';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER fail_second_beat BEFORE UPDATE OF heartbeat_at ON awa.jobs FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state = 'running')
    EXECUTE FUNCTION public.fail_second_beat();
"""


async def test_one_failed_heartbeat_stops_no_handler(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute(FAIL_THE_SECOND_BEAT)
    ran: list[str] = []

    @client.task(None, kind="long", queue="q")
    async def long(job: awa.Job[Any]) -> None:
        try:
            await asyncio.sleep(4.5)  # past the failed beat and the limit after it
            ran.append("returned")
        except asyncio.CancelledError:
            ran.append("stopped")
            raise

    job = await client.insert({}, kind="long", queue="q", max_attempts=1)
    await client.start([("q", 1)], **SETTINGS)
    try:

        async def ended() -> bool:
            return bool(ran)

        await wait_for(ended, timeout=30)
    finally:
        await client.shutdown(timeout_ms=2_000)
    assert ran == ["returned"]
    row = db.execute("SELECT nextval('public.beats')").fetchone()
    assert row is not None and row[0] > 3  # the second beat failed, later ones went on
    done = await client.get_job(job.id)
    assert done.state is awa.JobState.COMPLETED and done.errors == []


async def test_a_row_held_by_another_transaction_holds_back_no_other_beat(
    client: awa.AsyncClient, database_url: str
) -> None:
    """An operator's transaction holding one running row past the lease limit: the beat
    skips that row instead of waiting for it, so the process's other handlers keep their
    leases (a review: every handler of the process was stopped for one locked row)."""
    started: dict[str, asyncio.Event] = {"held": asyncio.Event(), "free": asyncio.Event()}
    ended: dict[str, str] = {}

    @client.task(None, kind="long", queue="q")
    async def long(job: awa.Job[Any]) -> None:
        name = job.args["name"]
        started[name].set()
        try:
            for step in range(45):  # progress all along: the writer meets the held row
                job.set_progress(step * 2)
                await asyncio.sleep(0.1)
            ended[name] = "returned"
        except asyncio.CancelledError:
            ended[name] = "stopped"
            raise

    # The held row after the free one: the writer locks in id order.
    free = await client.insert({"name": "free"}, kind="long", queue="q", max_attempts=1)
    held = await client.insert({"name": "held"}, kind="long", queue="q", max_attempts=1)
    # Stale after 3 s, lease limit 2.25 s: the row is held for 2.7 s, between the two.
    await client.start([("q", 2)], **{**FAST_WORKER, "heartbeat_interval_ms": 300,
                                      "heartbeat_staleness_ms": 3_000})  # fmt: skip
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 30)
        async with await psycopg.AsyncConnection.connect(database_url) as operator:
            await operator.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", [held.id])
            await asyncio.sleep(2.7)  # the fault itself: a lock left open this long
            await operator.commit()

        async def free_ended() -> bool:
            return "free" in ended

        await wait_for(free_ended, timeout=30)
    finally:
        await client.shutdown(timeout_ms=2_000)
    assert ended["free"] == "returned"
    done = await client.get_job(free.id)
    assert done.state is awa.JobState.COMPLETED and done.errors == []


async def test_a_held_row_is_neither_confirmed_nor_lost(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    job = await client.insert({}, kind="k", queue="q")
    row = db.execute(
        "UPDATE awa.jobs SET state = 'running', run_lease = run_lease + 1, "
        "attempted_at = clock_timestamp(), heartbeat_at = clock_timestamp() "
        "WHERE id = %s RETURNING id, run_lease, attempted_at",
        (job.id,),
    ).fetchone()
    assert row is not None
    key = (row[0], row[1], row[2])
    older = (row[0], row[1] - 1, row[2])  # an attempt this row no longer runs
    pool = await client._get_pool()
    async with await psycopg.AsyncConnection.connect(database_url) as operator:
        await operator.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", [job.id])
        assert await heartbeat.beat_rows(pool, [key]) == (set(), {job.id})
        assert await heartbeat.beat_rows(pool, [older]) == (set(), set())  # lost, held or not
        assert await heartbeat.still_running(pool, [key]) == {job.id}  # still names it
        await operator.commit()
    assert await heartbeat.beat_rows(pool, [key]) == ({job.id}, set())


def _running(db: psycopg.Connection[Any], job_id: int) -> None:
    db.execute(
        "UPDATE awa.jobs SET state = 'running', run_lease = run_lease + 1, "
        "attempted_at = clock_timestamp(), heartbeat_at = clock_timestamp() WHERE id = %s",
        (job_id,),
    )


async def test_flush_progress_waits_for_a_held_row_then_writes(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The periodic writer skips a held row; a handler's own ``flush_progress()`` asked
    for this write, so it waits for the row instead of reporting a lost lease."""
    job = await client.insert({}, kind="k", queue="q")
    _running(db, job.id)
    running = await client.get_job(job.id)
    attempt = Attempt(running, FakePermit(), 0, None)  # type: ignore[arg-type]
    attempt.set_progress(50, "half way", None)
    pool = await client._get_pool()
    async with await psycopg.AsyncConnection.connect(database_url) as operator:
        await operator.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", [job.id])
        assert await progress.write_many(pool, [attempt]) == set()  # skipped, not lost
        flush = asyncio.create_task(progress.write_one(pool, attempt))
        await operator.commit()
    assert await asyncio.wait_for(flush, 30) is True
    stored = await client.get_job(job.id)
    assert stored.progress is not None and stored.progress["message"] == "half way"


async def test_the_shutdowns_write_waits_for_a_held_row(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Shutdown writes what its unfinished attempts recorded, then fences them (a
    statement that waits for the row): a write that skipped a held row was overtaken by
    the fence, and the retry resumed from an older checkpoint (a review)."""
    attempts = []
    for step in (1, 2):
        job = await client.insert({"n": step}, kind="k", queue="q")
        _running(db, job.id)
        attempt = Attempt(await client.get_job(job.id), FakePermit(), 0, None)  # type: ignore[arg-type]
        attempt.set_progress(50, None, {"step": step})
        attempts.append(attempt)
    held, free = attempts
    pool = await client._get_pool()
    async with await psycopg.AsyncConnection.connect(database_url) as operator:
        await operator.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", [held.key[0]])
        write = asyncio.create_task(progress.write_waiting(pool, attempts))

        async def free_written() -> bool:
            return (await client.get_job(free.key[0])).progress is not None

        await wait_for(free_written, timeout=30)  # the free row at once
        assert not write.done()  # the held one waited for
        await operator.commit()
    assert await asyncio.wait_for(write, 30) == {held.key[0], free.key[0]}
    stored = await client.get_job(held.key[0])
    assert stored.progress is not None and stored.progress["checkpoint"] == {"step": 1}
