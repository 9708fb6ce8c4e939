"""client.explain for the fleet-wide limits (CONTRACT §8–§9): each code with a job held
back by exactly that limit, by a real worker claiming through the fleet's claim."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import awa
from awa.types import ReasonCode as C
from tests.helpers import wait_for
from tests.integration.test_explain import (
    LIVE,
    codes,
    explained,
    live,
    register_blocking,
    register_quick,
)


@pytest.fixture
def gate() -> asyncio.Event:
    return asyncio.Event()


async def _running(client: awa.AsyncClient, job_id: int) -> bool:
    return (await client.get_job(job_id)).state is awa.JobState.RUNNING


async def test_concurrency_limit_gives_the_cap_and_the_running_count(
    client: awa.AsyncClient, gate: asyncio.Event, db: psycopg.Connection[Any]
) -> None:
    register_blocking(client, gate)
    await client.set_queue_limits("q", concurrency=1)
    await client.start([("q", 4)], **LIVE)
    try:
        first = await client.insert({}, kind="block", queue="q")
        await wait_for(lambda: _running(client, first.id))
        second = await client.insert({}, kind="block", queue="q")
        found = await explained(client, second.id, first=C.CONCURRENCY_LIMIT)
        assert codes(found) == [C.CONCURRENCY_LIMIT]
        message = found.reasons[0].message
        assert message.startswith("Queue 'q' may run 1 job at once across the fleet (set ")
        assert "and 1 is running: it starts when one of them ends" in message
        assert "queue 'q' is at its fleet limit of 1 running" in found.summary
        # A job a stopped process left running: claimed long ago, in no live snapshot
        # (its heartbeat ahead, so that this test's fast rescuer leaves it to explain).
        left = await client.insert({}, kind="block", queue="q")  # waits behind the cap
        db.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, "
            "attempted_at = now() - interval '10 minutes', "
            "heartbeat_at = now() + interval '1 hour' WHERE id = %s",
            [left.id],
        )
        found = await explained(client, second.id, first=C.CONCURRENCY_LIMIT)
        reason = found.reasons[0]
        assert reason.details["unattended"] == 1
        assert "and 2 are running, 1 of them in no live process" in reason.message
        assert "it starts when one of them ends or is rescued" in reason.message
    finally:
        gate.set()
        await client.shutdown()


async def test_partition_limit_names_the_partition(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    register_blocking(client, gate)
    await client.set_queue_limits("q", concurrency=1, partition_by="customer")
    await client.start([("q", 4)], **LIVE)
    try:
        first = await client.insert({"customer": "acme"}, kind="block", queue="q")
        await wait_for(lambda: _running(client, first.id))
        waiting = await client.insert({"customer": "acme"}, kind="block", queue="q")
        other = await client.insert({"customer": "globex"}, kind="block", queue="q")
        await wait_for(lambda: _running(client, other.id))  # not held back by acme
        found = await explained(client, waiting.id, first=C.PARTITION_LIMIT)
        assert codes(found) == [C.PARTITION_LIMIT]
        message = found.reasons[0].message
        assert message.startswith("Partition customer='acme' of queue 'q' is at its fleet limit")
        assert "it runs 1 of its jobs, its limit of 1 per partition" in message
        assert "The other partitions of 'q' are not held back by it." in message
        assert found.reasons[0].details["partition"] == "acme"
    finally:
        gate.set()
        await client.shutdown()


async def test_pool_limit_gives_the_pool_and_what_its_members_run(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    register_blocking(client, gate)
    await client.set_fleet_pool(1, {"q": awa.PoolMember(weight=2)})
    await client.start([("q", 4)], **LIVE)
    try:
        first = await client.insert({}, kind="block", queue="q")
        await wait_for(lambda: _running(client, first.id))
        second = await client.insert({}, kind="block", queue="q")
        found = await explained(client, second.id, first=C.POOL_LIMIT)
        assert codes(found) == [C.POOL_LIMIT]
        message = found.reasons[0].message
        assert "member of the fleet pool of 1 (min 0, weight 2) and the pool has no room" in (
            message
        )
        assert "it runs 1, and the members run 1 of 1" in message
    finally:
        gate.set()
        await client.shutdown()


async def test_pool_limit_names_the_parts_when_the_pool_has_room(
    client: awa.AsyncClient, gate: asyncio.Event, db: psycopg.Connection[Any]
) -> None:
    """The pool has room, but every process that could take the job runs its part of the
    member's share (ADR 0037) — here beside a process that stopped with its part: explain
    said "a live process has a free permit: its next poll claims it" for the 30 s its part
    stayed reserved (a review)."""
    register_blocking(client, gate)
    await client.set_fleet_pool(4, {"q": awa.PoolMember()})
    await client.start([("q", 4)], **LIVE)
    try:
        await live(client, "q")
        (me,) = [i.instance_id for i in await client.list_runtime_instances()]
        # A second process serving q that stopped (SIGKILL) a moment ago: its row, a copy
        # of this one's, is live for 30 s more and keeps its part of the share reserved.
        copy_row = (
            "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,"
            " last_seen_at, snapshot) SELECT %s, hostname, 1, started_at, now(),"
            " jsonb_set(snapshot, '{instance_id}', to_jsonb(%s::text))"
            " FROM awa.runtime_instances WHERE instance_id = %s"
            " ON CONFLICT (instance_id) DO UPDATE SET snapshot = excluded.snapshot,"
            " last_seen_at = excluded.last_seen_at"
        )
        stopped = "00000000-0000-0000-0000-0000000000ee"
        db.execute(copy_row, (stopped, stopped, me))
        jobs = await client.insert_many([{}] * 3, kind="block", queue="q")

        async def held_at_its_part() -> bool:
            db.execute(copy_row, (stopped, stopped, me))  # not yet pruned by the leader
            running = [await _running(client, j.id) for j in jobs]
            (mine,) = [i for i in await client.list_runtime_instances() if i.instance_id == me]
            fleet = mine.snapshot.queues["q"].fleet if mine.snapshot else None
            return running == [True, True, False] and fleet is not None and fleet.blocked == "pool"

        await wait_for(held_at_its_part)  # 2 of the pool's 4: this process's part

        async def explained_at_the_parts() -> awa.Explanation | None:
            db.execute(copy_row, (stopped, stopped, me))  # the stopped one, held there too
            found = await client.explain(jobs[2].id)
            top = found.reasons[0]
            return found if top.code == C.POOL_LIMIT and "its part" in top.message else None

        found = await wait_for(explained_at_the_parts)
        reason = found.reasons[0]
        assert "the fleet pool of 4, which has room for 2 more" in reason.message
        assert "each of the 2 processes with a free permit runs its part" in reason.message
        assert "keeps its part until its row is 30 s old" in reason.message
        assert reason.details["processes_at_part"] == 2
        assert "runs its part of the fleet pool" in found.summary
        assert "has not reported" not in reason.message  # both reported a moment ago
        # Silent for 20 s (killed): still counted, its part reserved — and named, or the
        # sentence added up to more than ran (a review).
        db.execute(
            "UPDATE awa.runtime_instances SET last_seen_at = now() - interval '20 seconds' "
            "WHERE instance_id = %s",
            (stopped,),
        )
        silent = (await client.explain(jobs[2].id)).reasons[0].message
        assert ":1 has not reported for 20 s (stopped or frozen?): its part stays reserved" in (
            silent
        )
    finally:
        gate.set()
        await client.shutdown()


async def test_fleet_rate_limit_gives_the_bucket_and_the_turn(client: awa.AsyncClient) -> None:
    register_quick(client)
    # One token per 100 s and a burst of one, across the fleet.
    await client.set_queue_limits("q", rate_limit=0.01, burst=1)
    await client.start([("q", 4)], **LIVE)
    try:
        first = await client.insert({}, kind="quick", queue="q")
        await wait_for(lambda: _completed(client, first.id))
        jobs = await client.insert_many([{}, {}, {}], kind="quick", queue="q")
        found = await explained(client, jobs[-1].id, first=C.RATE_LIMITED)
        assert codes(found) == [C.RATE_LIMITED, C.QUEUED_BEHIND]
        reason = found.reasons[0]
        assert reason.message.startswith(
            "Queue 'q' is rate limited across the fleet to 0.01/s (set "
        )
        assert "the bucket (0.01/s, burst 1) holds 0.0" in reason.message
        assert "the 2 jobs ahead of it take the first" in reason.message
        assert 290 < reason.details["turn_in_s"] <= 300
        assert 90 < reason.details["next_token_in_s"] <= 100
    finally:
        await client.shutdown()


async def _completed(client: awa.AsyncClient, job_id: int) -> bool:
    job: awa.Job[Any] = await client.get_job(job_id)
    return job.state is awa.JobState.COMPLETED


async def test_paused_queue_at_its_fleet_cap_names_the_pause_first(
    client: awa.AsyncClient, gate: asyncio.Event
) -> None:
    register_blocking(client, gate)
    await client.set_queue_limits("q", concurrency=1)
    await client.start([("q", 4)], **LIVE)
    try:
        first = await client.insert({}, kind="block", queue="q")
        await wait_for(lambda: _running(client, first.id))
        await client.pause_queue("q", paused_by="ops")
        second = await client.insert({}, kind="block", queue="q")
        found = await client.explain(second.id)
        assert codes(found) == [C.QUEUE_PAUSED, C.CONCURRENCY_LIMIT]
    finally:
        gate.set()
        await client.shutdown()
