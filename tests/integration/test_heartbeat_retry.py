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
