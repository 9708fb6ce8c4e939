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


async def test_a_claim_during_an_uncommitted_pause_waits_and_then_sees_it(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    db.autocommit = True
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
        claim_pid = claimer.info.backend_pid
        claim = asyncio.create_task(claimer.execute(CLAIM, ("q",)))

        async def claim_blocked() -> bool:
            return claim_pid in {pid for pid, _ in _advisory_waiters(db)}

        await wait_for(claim_blocked)
        await pauser.commit()
        cur = await asyncio.wait_for(claim, timeout=15)
        assert await cur.fetchall() == []
    assert (await client.get_job(waiting.id)).state is awa.JobState.AVAILABLE


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
