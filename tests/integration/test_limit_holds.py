"""What a claim of a fleet-limited queue reports, and what a limits change does to jobs
already running (CONTRACT §8, migration 0017).

A hold tells the worker what to wait for: a freed slot, or for a rate limit the next
token's time, before which it does not ask again. So a hold is reported only when it
bound the claim; a queue that ran dry first reports none. And a per-key cap counts the
running jobs by the partition_by in force, including jobs claimed before it was set.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
from tests.helpers import FAST_WORKER, wait_for


def _claim(db: psycopg.Connection[Any], queue: str, limit: int = 4) -> tuple[list[int], list[Any]]:
    """The claimed ids, and the holds reported as (blocked, retry_in_ms)."""
    rows = db.execute(
        "SELECT id, blocked, retry_in_ms FROM awa.claim(%s, %s, 0, 'on')", (queue, limit)
    ).fetchall()
    return [r[0] for r in rows if r[0] is not None], [r[1:] for r in rows if r[0] is None]


async def test_a_rate_limited_queue_that_ran_dry_is_not_told_to_wait(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("r", rate_limit=0.02, burst=1)  # a token every 50 s
    assert _claim(db, "r") == ([], [])  # a full bucket and no jobs: nothing to wait for
    await client.insert_many([{}] * 2, kind="k", queue="r")
    ids, holds = _claim(db, "r")
    assert len(ids) == 1  # the one token
    [(blocked, retry_in_ms)] = holds
    assert blocked == "rate" and retry_in_ms > 40_000  # the next token is that far away


async def test_a_rate_limit_with_tokens_to_spare_reports_no_hold(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("r", rate_limit=1.0, burst=3)
    await client.insert_many([{}] * 2, kind="k", queue="r")
    ids, holds = _claim(db, "r")
    assert len(ids) == 2 and holds == []  # a token is left: the queue ran dry, not the bucket


async def test_a_capped_queue_that_ran_dry_is_not_held(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("c", concurrency=3)
    await client.insert_many([{}] * 2, kind="k", queue="c")
    ids, holds = _claim(db, "c", limit=4)  # room for 3, 2 waiting
    assert len(ids) == 2 and holds == []
    await client.insert_many([{}] * 2, kind="k", queue="c")
    ids, holds = _claim(db, "c", limit=4)  # room for 1: the cap binds
    assert len(ids) == 1 and holds == [("concurrency", None)]


async def test_a_pool_member_that_ran_dry_is_not_held(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_fleet_pool(2, {"m": awa.PoolMember()})
    assert _claim(db, "m") == ([], [])
    await client.insert_many([{}] * 3, kind="k", queue="m")
    ids, holds = _claim(db, "m")
    assert len(ids) == 2 and holds == [("pool", None)]


async def test_a_key_cap_set_while_jobs_run_counts_them(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.insert_many([{"tenant": "x"}, {}], kind="k", queue="p")
    assert len(_claim(db, "p")[0]) == 2  # running, claimed with no partition_by
    await client.set_queue_limits("p", concurrency=1, partition_by="tenant")
    await client.insert_many([{"tenant": "x"}, {}, {"tenant": "y"}], kind="k", queue="p")
    ids, holds = _claim(db, "p")
    # Keys "x" and "" (no tenant) each run one already; only "y" has room.
    (claimed_args,) = db.execute(
        "SELECT array_agg(args ->> 'tenant') FROM awa.jobs WHERE id = ANY(%s)", (ids,)
    ).fetchone()
    assert claimed_args == ["y"] and holds == [("partition", None)]
    await client.set_queue_limits("p", concurrency=1, partition_by="region")
    # Re-keyed again by the new partition_by: all four running jobs share key "".
    assert _claim(db, "p") == ([], [("partition", None)])


async def test_a_raised_rate_limit_applies_before_the_old_limits_next_token(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []

    @client.task(None, kind="paced", queue="r")
    async def paced(job: awa.Job[Any]) -> None:
        ran.append(job.id)

    await client.set_queue_limits("r", rate_limit=0.02, burst=1)  # a token every 50 s
    first = await client.insert({}, kind="paced", queue="r")
    # A long refresh cadence: only the change's own notice can apply it in time.
    await client.start([("r", 4)], **{**FAST_WORKER, "override_refresh_ms": 600_000})
    try:

        async def ran_all(*ids: int) -> bool:
            return set(ids) <= set(ran)

        await wait_for(lambda: ran_all(first.id))  # the bucket's one token: next in 50 s
        await client.set_queue_limits("r", rate_limit=100.0)
        second = await client.insert({}, kind="paced", queue="r")
        await wait_for(lambda: ran_all(second.id))  # long before the old limit's token
    finally:
        await client.shutdown()


async def test_a_cancelled_running_job_wakes_the_claimers_its_cap_held_back(
    client: awa.AsyncClient,
) -> None:
    """Polls (and the control cadence) an hour apart: only the `freed` notice of the
    cancel can start the job waiting behind the cap of 1."""
    await client.set_queue_limits("c", concurrency=1)
    release = asyncio.Event()
    started: list[int] = []

    @client.task(None, kind="k", queue="c")
    async def handler(job: awa.Job[Any]) -> None:
        started.append(job.id)
        await release.wait()

    await client.insert_many([{}] * 2, kind="k", queue="c")
    hour = 3_600_000
    await client.start(
        [("c", 2)], **{**FAST_WORKER, "poll_interval_ms": hour, "override_refresh_ms": hour}
    )
    try:
        dispatcher = client._worker.dispatchers["c"]

        async def held_on_the_cap() -> bool:
            return len(started) == 1 and dispatcher.blocked == "concurrency"

        await wait_for(held_on_the_cap)
        await client.cancel(started[0])
        await wait_for(lambda: _started(started, 2))
    finally:
        release.set()
        await client.shutdown()


async def _started(started: list[int], n: int) -> bool:
    return len(started) == n


async def test_a_rescued_running_job_announces_its_freed_slot(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    from awa.maintenance import rescuer
    from tests.helpers import lead_maintenance

    await client.set_queue_limits("c", concurrency=1)
    await client.set_queue_limits("uncapped", rate_limit=100.0)
    for queue in ("c", "uncapped"):
        await client.insert({}, kind="k", queue=queue)
        db.execute("SELECT * FROM awa.claim(%s, 1, 0, 'on')", (queue,))
    db.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour'")
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN awa_control")
        rescued = await rescuer.rescue_stale_heartbeats(
            await client._get_pool(), 60_000, lead_maintenance(db)
        )
        assert sorted(r[1] for r in rescued) == ["c", "uncapped"]
        notices = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert notices == ['{"freed" : "c"}']  # the capped queue's, not the other's


async def test_a_partition_held_by_its_bucket_says_when_its_next_token_comes(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("p", rate_limit=0.5, burst=1, partition_by="k")  # 1 per 2 s
    await client.insert_many([{"k": "a"}] * 2, kind="k", queue="p")
    ids, holds = _claim(db, "p")
    assert len(ids) == 1  # key a's one token
    [(blocked, retry_in_ms)] = holds
    # its next token, told as "look again then" (negative: not a wait, see migration 0026)
    assert blocked == "partition" and -2_000 <= retry_in_ms < -1_000
    await client.set_queue_limits("p", concurrency=1, partition_by="k")  # a cap, no rate
    assert _claim(db, "p") == ([], [("partition", None)])  # woken by `freed`, not a timer


async def test_the_leader_forgets_rate_buckets_that_refilled_and_keeps_the_others(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    from awa.maintenance import pruner
    from tests.helpers import lead_maintenance

    await client.set_queue_limits("p", rate_limit=1.0, burst=2, partition_by="k")
    await client.insert_many([{"k": f"t{n}"} for n in range(30)], kind="k", queue="p")
    assert len(_claim(db, "p", limit=30)[0]) == 30  # a bucket per key, each spent by one
    refilled = "UPDATE awa.queue_rate_buckets SET refilled_at = now() - interval '1 hour'"
    db.execute(refilled + " WHERE partition_key <> 't0'")  # all but t0's are full again
    pruned = await pruner.prune_full_rate_buckets(await client._get_pool(), lead_maintenance(db))
    assert pruned == 29
    rows = db.execute("SELECT partition_key FROM awa.queue_rate_buckets").fetchall()
    assert rows == [("t0",)]  # still spending its token: kept


async def test_a_shutdowns_fence_announces_the_freed_slot(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    from awa.db import sql

    await client.set_queue_limits("c", concurrency=1)
    await client.insert({}, kind="k", queue="c")
    (job_id, run_lease, attempted_at) = db.execute(
        "SELECT id, run_lease, attempted_at FROM awa.claim('c', 1, 0, 'on')"
    ).fetchone() or (None, None, None)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN awa_control")
        fenced = db.execute(
            sql.JOB_FENCE_ATTEMPTS,
            {"ids": [job_id], "run_leases": [run_lease], "attempted_ats": [attempted_at],
             "reason": "worker shut down"},
        ).fetchall()  # fmt: skip
        assert fenced == [(job_id,)]
        notices = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert notices == ['{"freed" : "c"}']
