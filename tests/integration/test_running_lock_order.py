"""Every statement that changes several running jobs and may wait for them locks their rows
in id order (migration 0029), so no two of them deadlock. The completion locked in the
order its outcomes came in and the heartbeat in heap order: while something else held the
rows (a change of partition_by locks a queue's running jobs), both queued up, each took
its first row when the holder let go, and waited for the other's (8 deadlocks in 30 s of
a 64-handler drain with 200 ms heartbeats while partition_by changed)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa
from awa import bridge
from awa.db import sql
from tests.helpers import wait_for

Key = tuple[int, int, Any]  # (id, run_lease, attempted_at)


def _running_with_the_higher_id_first_in_the_heap(db: psycopg.Connection[Any]) -> list[Key]:
    """Two running jobs a < b whose running row versions lie b first in the table."""
    for priority in (2, 1):  # a, then b (ids in insert order)
        db.execute(
            "INSERT INTO awa.jobs (kind, queue, args, priority) VALUES ('k', 'q', '{}', %s)",
            (priority,),
        )
    for _ in range(2):  # b first (higher priority): its claimed version is written first
        db.execute("SELECT * FROM awa.claim('q', 1, 0, 'on')")
    rows = db.execute(
        "SELECT id, run_lease, attempted_at FROM awa.jobs WHERE state = 'running' ORDER BY ctid"
    ).fetchall()
    assert [row[0] for row in rows] == sorted((row[0] for row in rows), reverse=True)
    return sorted(rows)


def _key_params(keys: list[Key]) -> dict[str, Any]:
    return {
        "ids": [k[0] for k in keys],
        "run_leases": [k[1] for k in keys],
        "attempted_ats": [k[2] for k in keys],
    }


def _completion(keys: list[Key]) -> dict[str, Any]:
    outcomes = [
        {"id": i, "run_lease": lease, "attempted_at": at.isoformat(), "state": "completed",
         "delay_ms": None, "refund": False, "error": None}
        for i, lease, at in keys
    ]  # fmt: skip
    return {"outcomes": json.dumps(outcomes), "synchronous_commit": "on", "claims": None}


def _writer(name: str, keys: list[Key]) -> tuple[str, dict[str, Any]]:
    if name == "heartbeat":
        return sql.JOB_HEARTBEAT_MANY, {**_key_params(keys), "synchronous_commit": "on"}
    if name == "progress":
        params = {**_key_params(keys), "progress": [Jsonb({"p": 1})] * 2, "metadata": [None] * 2}
        return sql.JOB_PROGRESS_MANY, params
    if name == "fence":
        return sql.JOB_FENCE_ATTEMPTS, {**_key_params(keys), "reason": "shutting down"}
    if name == "completion":
        return sql.JOB_FINALIZE_MANY, _completion(keys)
    return sql.JOB_FINALIZE_MANY, _completion(keys[::-1])  # outcomes in reverse id order


# What each leaves the two jobs in.
WRITERS = {
    "heartbeat": "running",
    "progress": "running",
    "fence": "retryable",
    "completion": "completed",
    "completion, outcomes reversed": "completed",
}


@pytest.mark.parametrize("writer", list(WRITERS))
async def test_a_writer_of_several_running_jobs_locks_them_in_id_order(
    writer: str, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Blocked on the lowest id, the writer holds none of the others: that order, shared by
    every such writer, is what keeps any two from each waiting for the other."""
    keys = _running_with_the_higher_id_first_in_the_heap(db)
    lowest, highest = keys[0][0], keys[-1][0]
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn,
    ):
        await holder.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE", (lowest,))
        write = asyncio.create_task(conn.execute(*_writer(writer, keys)))

        async def waits_for_a_row() -> bool:
            if write.done():  # failed at once: awaiting it below raises
                return True
            row = db.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                (conn.info.backend_pid,),
            ).fetchone()
            return row is not None and row[0] == "Lock"

        try:
            await wait_for(waits_for_a_row)
            # NOWAIT: refused at once if the writer locked the higher id before the lowest.
            db.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE NOWAIT", (highest,))
        finally:
            await holder.rollback()
            await asyncio.wait_for(write, timeout=30)
        rows = await write.result().fetchall()
    assert sorted(row[0] for row in rows) == [lowest, highest]  # both written
    states = {row[0] for row in db.execute("SELECT state::text FROM awa.jobs")}
    assert states == {WRITERS[writer]}


CLAIM_LOCK = 1635213681  # a capped queue's claim lock: (CLAIM_LOCK, hashtext(queue))


@pytest.mark.parametrize("riding", [["a", "b"], ["b", "a"]])
async def test_claims_riding_on_a_completion_lock_their_queues_in_name_order(
    riding: list[str], db: psycopg.Connection[Any], database_url: str
) -> None:
    """Riding claims locked capped queues in the order the worker listed its queues: two
    processes started with them in different orders deadlocked (a review's soak). Blocked
    on the first queue by name, the completion holds no other queue's claim lock."""
    for queue in ("a", "b"):
        db.execute("INSERT INTO awa.queue_limits (queue, concurrency) VALUES (%s, 5)", (queue,))
    claims = json.dumps([
        {"queue": q, "limit": 1, "deadline_ms": 0, "instance": None, "held": 0} for q in riding
    ])  # fmt: skip
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn,
    ):
        await holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('a'))", (CLAIM_LOCK,))
        completion = asyncio.create_task(
            conn.execute("SELECT * FROM awa.complete_and_claim('[]', 'on', %s)", (claims,))
        )

        async def waits_for_a_lock() -> bool:
            if completion.done():
                return True
            row = db.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                (conn.info.backend_pid,),
            ).fetchone()
            return row is not None and row[0] == "Lock"

        try:
            await wait_for(waits_for_a_lock)
            row = db.execute(
                "SELECT pg_try_advisory_xact_lock(%s, hashtext('b'))", (CLAIM_LOCK,)
            ).fetchone()
            assert row == (True,), "the completion took b's claim lock before a's"
        finally:
            await holder.rollback()
            await asyncio.wait_for(completion, timeout=30)


@pytest.mark.parametrize("writer", ["drain", "batch chunk"])
async def test_writers_of_several_waiting_jobs_lock_them_in_id_order(
    writer: str, client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A drain locked a queue's waiting jobs in heap order, a batch operation's chunk in id
    order: the two deadlocked (a review). Blocked on the lowest id, neither holds the other."""
    await client.insert_many([{"n": i} for i in range(500)], kind="k", queue="other")
    low = await client.insert({"n": 1}, kind="k", queue="q")
    high = await client.insert({"n": 2}, kind="k", queue="q")
    db.execute("UPDATE awa.jobs SET tags = tags WHERE id = %s", (low.id,))  # behind high's
    db.execute("ANALYZE awa.jobs")
    op = await client.apply_batch(awa.SetPriority(1), queue="q", wait=False)
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE", (low.id,))
        if writer == "drain":
            write = asyncio.create_task(client.drain_queue("q"))
        else:
            write = asyncio.create_task(client.run_batch(op.id))

        async def waits_for_a_row() -> bool:
            if write.done():
                return True
            row = db.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            return row is not None and row[0] == 1

        try:
            await wait_for(waits_for_a_row)
            db.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE NOWAIT", (high.id,))
        finally:
            await holder.rollback()
            await asyncio.wait_for(write, timeout=30)
    expected = "cancelled" if writer == "drain" else "available"
    states = db.execute("SELECT DISTINCT state::text FROM awa.jobs WHERE queue = 'q'").fetchall()
    assert states == [(expected,)]


@pytest.mark.parametrize("claim", ["a lone claim", "a claim riding on a completion"])
async def test_a_claims_demand_signal_never_waits_for_the_members_row(
    claim: str, client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The demand signal (asked_at) was written before the pool's lock on some paths and
    after it on others, so a claim holding one member's row could wait for the pool's lock
    held by one waiting for that row (a review's repro). It is a hint: a claim now skips it
    while another transaction holds the row (migration 0030)."""
    await client.set_fleet_pool(2, {"a": awa.PoolMember(weight=1), "b": awa.PoolMember()})
    await client.insert({}, kind="k", queue="a")
    if claim == "a lone claim":  # the pool's lock, then the signal
        statement, params = "SELECT * FROM awa.claim('a', 1, 0, 'on')", None
    else:  # at its part (held beyond it): the signal without the pool's lock
        claims = [{"queue": "a", "limit": 1, "deadline_ms": 0, "instance": "i", "held": 99}]
        statement = "SELECT * FROM awa.complete_and_claim('[]', 'on', %s)"
        params = (json.dumps(claims),)
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn,
    ):
        await holder.execute("UPDATE awa.fleet_pool_members SET weight = 1 WHERE queue = 'a'")
        run = asyncio.create_task(conn.execute(statement, params))

        async def done_or_waiting() -> bool:
            row = db.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                (conn.info.backend_pid,),
            ).fetchone()
            return run.done() or (row is not None and row[0] == "Lock")

        try:
            await wait_for(done_or_waiting)
            assert run.done(), "the claim waits for the member row the holder has"
        finally:
            await holder.rollback()
            await asyncio.wait_for(run, timeout=30)
    (asked,) = db.execute(
        "SELECT asked_at FROM awa.fleet_pool_members WHERE queue = 'a'"
    ).fetchone()
    assert asked is None  # skipped, not written late


@pytest.mark.parametrize("writer", ["heartbeat", "progress"])
async def test_a_heartbeat_never_waits_for_the_row_of_an_attempt_that_lost_its_lease(
    writer: str, db: psycopg.Connection[Any], database_url: str
) -> None:
    """An attempt whose job was rescued (its handler still running) stays in the batch;
    locking its row whatever its state made every heartbeat of the process wait for an
    operator holding it (a bulk retry), until the live jobs were rescued (a review)."""
    keys = _running_with_the_higher_id_first_in_the_heap(db)
    lost = keys[0][0]
    db.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = %s", (lost,))
    async with (
        await psycopg.AsyncConnection.connect(database_url) as operator,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn,
    ):
        await operator.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (lost,))
        beat = asyncio.create_task(conn.execute(*_writer(writer, keys)))

        async def done_or_waiting() -> bool:
            row = db.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                (conn.info.backend_pid,),
            ).fetchone()
            return beat.done() or (row is not None and row[0] == "Lock")

        try:
            await wait_for(done_or_waiting)
            assert beat.done(), "the heartbeat waits for a row it has no attempt on"
        finally:
            await operator.rollback()
            await asyncio.wait_for(beat, timeout=30)
        rows = await beat.result().fetchall()
    assert [row[0] for row in rows] == [keys[1][0]]  # the live attempt, and only it


async def test_a_batch_writes_its_unique_keys_in_key_order(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Two insert_many batches sharing unique keys in different orders deadlocked, each
    waiting for a key the other had written (a review: DeadlockDetected in 5 of 5 races,
    where one was due a UniqueConflict). Blocked on its lowest key, a batch holds none of
    its others."""
    items = [{"n": 1}, {"n": 2}]
    keys = {}
    with db.transaction(force_rollback=True):  # the keys these items get, nothing kept
        for item in items:
            job = bridge.insert_job(db, item, kind="k", queue="q", unique_opts={})
            assert isinstance(job, awa.Job)
            row = db.execute("SELECT unique_key FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
            keys[item["n"]] = bytes(row[0])
    low, high = sorted(items, key=lambda item: keys[item["n"]])
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        await psycopg.AsyncConnection.connect(database_url) as probe,
    ):
        # The holder's insert of the lowest key, left uncommitted.
        await bridge.insert_job(holder, low, kind="k", queue="q", unique_opts={})  # type: ignore[misc]
        batch = asyncio.create_task(
            client.insert_many([high, low], kind="k", queue="q", unique_opts={})
        )

        async def waits_for_a_key() -> bool:
            row = db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
            return batch.done() or (row is not None and row[0] == 1)

        try:
            await wait_for(waits_for_a_key)
            await probe.execute("SET lock_timeout = '200ms'")
            # Refused at once with LockNotAvailable if the batch wrote the higher key first.
            await bridge.insert_job(probe, high, kind="k", queue="q", unique_opts={})  # type: ignore[misc]
            await probe.rollback()
        finally:
            await holder.rollback()
            await asyncio.wait_for(batch, timeout=30)


@pytest.mark.parametrize("writer", ["retry_failed", "discard_failed", "move_failed_to_dlq"])
async def test_writers_of_several_failed_jobs_lock_them_in_id_order(
    writer: str, client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Bulk operations on failed jobs went in an index's or the heap's order: any two of
    them deadlocked (a review). Blocked on the lowest id, none holds the other."""
    await client.insert_many([{"n": i} for i in range(500)], kind="other", queue="other")
    low = await client.insert({"n": 1}, kind="k", queue="q")
    high = await client.insert({"n": 2}, kind="k", queue="q")
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = ANY(%s)",
        ([low.id, high.id],),
    )
    # Low's row moves behind high's (finalized_at is indexed: not a HOT update), and it
    # finished later: in heap, kind-index and finalized_at order, high comes first.
    db.execute(
        "UPDATE awa.jobs SET finalized_at = finalized_at + interval '1 second' WHERE id = %s",
        (low.id,),
    )
    db.execute("ANALYZE awa.jobs")
    calls = {
        "retry_failed": lambda: client.retry_failed(queue="q"),
        "discard_failed": lambda: client.discard_failed("k"),
        "move_failed_to_dlq": lambda: client.move_failed_to_dlq(queue="q"),
    }
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE", (low.id,))
        write = asyncio.create_task(calls[writer]())

        async def waits_for_a_row() -> bool:
            row = db.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            return write.done() or (row is not None and row[0] == 1)

        try:
            await wait_for(waits_for_a_row)
            db.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE NOWAIT", (high.id,))
        finally:
            await holder.rollback()
            await asyncio.wait_for(write, timeout=30)
    left = db.execute("SELECT count(*) FROM awa.jobs WHERE state = 'failed'").fetchone()
    assert left == (0,)  # both retried, discarded or moved
