"""Priority aging: waiting jobs gain a level per interval, never above 1, in claim order."""

from __future__ import annotations

from typing import Any

import psycopg

import awa
from awa.maintenance import aging
from tests.helpers import FAST_WORKER, lead_maintenance, wait_for


def _priorities(db: psycopg.Connection[Any]) -> dict[int, tuple[int, int]]:
    rows = db.execute("SELECT id, priority, original_priority FROM awa.jobs").fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


async def test_aging_raises_waiting_jobs_one_level_per_interval(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    fresh = await client.insert({}, kind="k", queue="q", priority=4)
    waited_2 = await client.insert({}, kind="k", queue="q", priority=4)
    waited_9 = await client.insert({}, kind="k", queue="q", priority=3)
    off = await client.insert({}, kind="k", queue="off", priority=4)
    db.execute("UPDATE awa.jobs SET run_at = now() - interval '2.5 seconds' WHERE id = %s",
               (waited_2.id,))  # fmt: skip
    db.execute("UPDATE awa.jobs SET run_at = now() - interval '9 seconds' WHERE id = ANY(%s)",
               ([waited_9.id, off.id],))  # fmt: skip
    pool = await client._get_pool()
    intervals = aging.aging_queues(
        [awa.QueueConfig("q", priority_aging_interval_ms=1_000),
         awa.QueueConfig("off", priority_aging_interval_ms=0)]
    )  # fmt: skip
    assert intervals == {"q": 1_000}
    epoch = lead_maintenance(db)
    assert await aging.age_priorities(pool, intervals, epoch - 1) == 0  # a stale leader
    assert await aging.age_priorities(pool, intervals, epoch) == 2
    assert await aging.age_priorities(pool, intervals, epoch) == 0  # nothing more until time passes
    p = _priorities(db)
    assert p[fresh.id] == (4, 4) and p[waited_2.id] == (2, 4) and p[waited_9.id] == (1, 3)
    assert p[off.id] == (4, 4)  # aging off for that queue


async def test_an_aged_job_overtakes_newer_higher_priority_work(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    order: list[str] = []

    @client.task(None, kind="k", queue="q")
    async def record(job: awa.Job[Any]) -> None:
        order.append(job.args["name"])

    old = await client.insert({"name": "old"}, kind="k", queue="q", priority=4)
    await client.insert({"name": "new"}, kind="k", queue="q", priority=2)
    db.execute("UPDATE awa.jobs SET run_at = now() - interval '10 seconds' WHERE id = %s",
               (old.id,))  # fmt: skip
    await client.pause_queue("q")
    await client.start(
        [awa.QueueConfig("q", max_workers=1, priority_aging_interval_ms=1_000)], **FAST_WORKER
    )
    try:

        async def aged() -> bool:
            return _priorities(db)[old.id][0] == 1

        await wait_for(aged)
        await client.resume_queue("q")

        async def both() -> bool:
            return len(order) == 2

        await wait_for(both)
    finally:
        await client.shutdown()
    assert order == ["old", "new"]


async def test_promotion_resets_priority_so_aging_counts_the_new_wait(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    job = await client.insert({}, kind="k", queue="q", priority=3)
    db.execute("UPDATE awa.jobs SET state = 'retryable', priority = 1, run_at = now() "
               "WHERE id = %s", (job.id,))  # fmt: skip
    from awa.maintenance import promoter

    assert await promoter.promote_due(await client._get_pool(), lead_maintenance(db)) == 1
    assert _priorities(db)[job.id] == (3, 3)


async def test_an_operators_retry_starts_again_from_the_original_priority(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Retried by hand (one job, every failed job, or from outside by callback), an aged
    job waits at its original priority again, as a promoted one does."""
    cancelled = await client.insert({}, kind="k", queue="q", priority=4)
    failed = await client.insert({}, kind="k", queue="q", priority=3)
    parked = await client.insert({}, kind="k", queue="q", priority=4)
    db.execute("UPDATE awa.jobs SET priority = 1, state = 'cancelled' WHERE id = %s",
               (cancelled.id,))  # fmt: skip
    db.execute("UPDATE awa.jobs SET priority = 1, state = 'failed' WHERE id = %s", (failed.id,))
    db.execute(
        "UPDATE awa.jobs SET priority = 1, state = 'waiting_external', "
        "callback_id = gen_random_uuid() WHERE id = %s",
        (parked.id,),
    )
    callback = db.execute("SELECT callback_id FROM awa.jobs WHERE id = %s", (parked.id,))
    (callback_id,) = callback.fetchone() or (None,)
    assert (await client.retry(cancelled.id)).priority == 4
    assert [j.priority for j in await client.retry_failed(queue="q")] == [3]
    assert (await client.retry_external(str(callback_id))).priority == 4
    assert _priorities(db) == {cancelled.id: (4, 4), failed.id: (3, 3), parked.id: (4, 4)}


async def test_an_operators_new_priority_restarts_aging(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A demotion of a backlog that had waited three intervals was aged straight back to
    1 at the next tick (aging counted from run_at); and SetPriority(p) skipped jobs aged
    to p, which went back to their old level once retried."""
    backlog = [await client.insert({"n": n}, kind="k", queue="q", priority=3) for n in range(3)]
    aged = await client.insert({"aged": True}, kind="k", queue="q", priority=4)
    db.execute("UPDATE awa.jobs SET run_at = now() - interval '3.5 seconds'")
    pool, intervals = await client._get_pool(), {"q": 1_000}
    epoch = lead_maintenance(db)
    assert await aging.age_priorities(pool, intervals, epoch) == 4
    assert {p for _, p in _priorities(db).items()} == {(1, 3), (1, 4)}

    ids = [j.id for j in backlog]
    op = await client.apply_batch(awa.SetPriority(4), ids=ids)
    assert op.processed == 3
    assert await aging.age_priorities(pool, intervals, epoch) == 0  # the demotion holds
    assert {_priorities(db)[i] for i in ids} == {(4, 4)}

    op = await client.apply_batch(awa.SetPriority(1), ids=[aged.id])  # at 1 by aging only
    assert op.processed == 1 and _priorities(db)[aged.id] == (1, 1)
    db.execute("UPDATE awa.jobs SET aging_from = now() - interval '1.5 seconds'")
    assert await aging.age_priorities(pool, intervals, epoch) == 3  # ages from the change
    assert {_priorities(db)[i] for i in ids} == {(3, 4)}
