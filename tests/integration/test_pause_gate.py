"""A pause holds from the moment it commits (migration 0014, ADR 0042).

The claim decides "paused?" in one statement and claims in the next; without the gate a
claim that read "not paused" just before a pause committed could take a job inserted just
after it. Each test drives the race by hand: one transaction held open at the critical
point, the other side seen waiting on the lock in pg_stat_activity before it is let go.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import awa
from tests.helpers import wait_for

CLAIM = "SELECT id FROM awa.claim(%s, 10, 0, 'on')"


def _advisory_waiters(db: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    """(pid, query) of every backend waiting on an advisory lock."""
    return db.execute(
        "SELECT pid, query FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
    ).fetchall()


async def test_pause_waits_for_a_claim_in_flight(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    db.autocommit = True
    async with await psycopg.AsyncConnection.connect(database_url) as claimer:
        await claimer.execute(CLAIM, ("q",))  # decided "not paused"; transaction still open
        pause = asyncio.create_task(client.pause_queue("q"))

        async def pause_blocked() -> bool:
            return any("queue_meta" in query for _, query in _advisory_waiters(db))

        await wait_for(pause_blocked)
        assert not pause.done()
        await claimer.commit()
        await asyncio.wait_for(pause, timeout=15)
    assert {s.queue: s for s in await client.queue_stats()}["q"].paused


async def test_a_claim_during_an_uncommitted_pause_claims_nothing_without_waiting(
    client: awa.AsyncClient, database_url: str
) -> None:
    """Migration 0035: the claim finds the pause's gate taken and claims nothing (it no
    longer waits for the pause's commit); if the pause rolls back, the next claim takes
    the job."""
    waiting = await client.insert({}, kind="k", queue="q")
    async with (
        await psycopg.AsyncConnection.connect(database_url) as pauser,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as claimer,
    ):
        # Paused by hand in SQL: the trigger gates it like pause_queue.
        await pauser.execute(
            "INSERT INTO awa.queue_meta (queue, paused) VALUES ('q', true) "
            "ON CONFLICT (queue) DO UPDATE SET paused = true"
        )
        cur = await asyncio.wait_for(claimer.execute(CLAIM, ("q",)), timeout=15)
        assert await cur.fetchall() == []
        assert (await client.get_job(waiting.id)).state is awa.JobState.AVAILABLE
        await pauser.rollback()
        cur = await asyncio.wait_for(claimer.execute(CLAIM, ("q",)), timeout=15)
        assert [r[0] for r in await cur.fetchall()] == [waiting.id]


async def test_a_completion_is_not_held_by_an_uncommitted_pause_of_a_riding_claim(
    client: awa.AsyncClient, database_url: str
) -> None:
    """A completion of one queue's job with a claim of a paused-but-uncommitted queue
    riding on it commits at once: it used to wait for the pause holding the finished
    row's lock, stalling every queue's completions while an operator's transaction
    stayed open (a review: 231 rows shown running past the fleet's 24 permits)."""
    done = await client.insert({}, kind="k", queue="other")
    queued = await client.insert({}, kind="k", queue="q")
    async with (
        await psycopg.AsyncConnection.connect(database_url) as pauser,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as worker,
    ):
        cur = await worker.execute(
            "SELECT id, run_lease, attempted_at FROM awa.claim('other', 1, 0, 'on')"
        )
        ((job_id, run_lease, attempted_at),) = await cur.fetchall()
        assert job_id == done.id
        await pauser.execute(
            "INSERT INTO awa.queue_meta (queue, paused) VALUES ('q', true) "
            "ON CONFLICT (queue) DO UPDATE SET paused = true"
        )
        outcome = {
            "id": job_id, "run_lease": run_lease, "attempted_at": attempted_at.isoformat(),
            "state": "completed",
        }  # fmt: skip
        completion = worker.execute(
            "SELECT row_type, id FROM awa.complete_and_claim(%s, 'on', %s)",
            (Jsonb([outcome]), Jsonb([{"queue": "q", "limit": 5, "deadline_ms": 0}])),
        )
        cur = await asyncio.wait_for(completion, timeout=15)
        assert await cur.fetchall() == [("applied", done.id)]
        assert (await client.get_job(done.id)).state is awa.JobState.COMPLETED
        assert (await client.get_job(queued.id)).state is awa.JobState.AVAILABLE
        await pauser.commit()


async def test_claims_do_not_wait_for_each_other_or_for_other_queues(
    client: awa.AsyncClient, database_url: str
) -> None:
    a = await client.insert({}, kind="k", queue="q")
    await client.insert({}, kind="k", queue="other")
    async with await psycopg.AsyncConnection.connect(database_url) as first:
        assert [r[0] for r in await (await first.execute(CLAIM, ("q",))).fetchall()] == [a.id]
        # Open: the first claim holds its gate; a second claim of q is not held up by it,
        # nor is a pause of another queue.
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            cur = await asyncio.wait_for(c.execute(CLAIM, ("q",)), timeout=15)
            assert await cur.fetchall() == []
        await asyncio.wait_for(client.pause_queue("other"), timeout=15)
        await first.commit()
