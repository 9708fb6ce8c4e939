"""One heartbeat lost to a passing error (a deadlock victim, a cancelled statement, a
read-only session during a failover) is tried again within a second: with the lease limit
at two intervals (the default ratio, ADR 0055), a full interval's wait stopped every
handler of a healthy worker, and a job on its last attempt ended failed (a review)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
from tests.helpers import FAST_WORKER, wait_for

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
            await asyncio.sleep(4.5)
            ended[name] = "returned"
        except asyncio.CancelledError:
            ended[name] = "stopped"
            raise

    held = await client.insert({"name": "held"}, kind="long", queue="q", max_attempts=1)
    free = await client.insert({"name": "free"}, kind="long", queue="q", max_attempts=1)
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
