"""The fleet-limit and fleet-pool API (CONTRACT §8–§9): storage, validation, status."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import wait_for


def _fleet_rows(db: psycopg.Connection[Any]) -> tuple[Any, ...]:
    return tuple(
        tuple(db.execute(f"SELECT * FROM awa.{table} ORDER BY 1").fetchall())
        for table in ("queue_limits", "queue_rate_buckets", "fleet_pool", "fleet_pool_members")
    )


async def test_limits_are_whole_state_and_nothing_set_means_unlimited(
    client: awa.AsyncClient,
) -> None:
    stored = await client.set_queue_limits("q", concurrency=3, rate_limit=2.5, burst=4)
    assert stored is not None
    assert (stored.queue, stored.concurrency, stored.rate_limit, stored.burst) == ("q", 3, 2.5, 4)
    assert stored.partition_by is None and stored.updated_at is not None
    stored = await client.set_queue_limits("q", partition_by="tenant")
    assert stored is not None and (stored.concurrency, stored.rate_limit) == (None, None)
    assert await client.queue_limits("q") == stored
    assert await client.set_queue_limits("q") is None  # nothing set: the row goes
    assert await client.queue_limits("q") is None
    assert await client.clear_queue_limits("q") is None


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"rate_limit": 0}, "rate_limit"),
        ({"rate_limit": -1.0}, "rate_limit"),
        ({"rate_limit": float("nan")}, "rate_limit"),
        ({"rate_limit": 1e10}, "rate_limit"),
        ({"rate_limit": 1.0, "burst": 0}, "burst"),
        ({"burst": 3}, "burst"),
        ({"partition_by": ""}, "partition_by"),
        ({"partition_by": "  "}, "partition_by"),
        ({"partition_by": "k" * 64}, "partition_by"),
        ({"partition_by": 7}, "partition_by"),
    ],
)
async def test_bad_limits_name_the_field_and_write_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any], options: dict[str, Any], field: str
) -> None:
    await client.set_queue_limits("q", concurrency=2)
    before = _fleet_rows(db)
    with pytest.raises(awa.ValidationError) as caught:
        await client.set_queue_limits("q", **options)
    assert caught.value.field == field
    assert _fleet_rows(db) == before


async def test_bad_pools_name_the_field_and_write_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_fleet_pool(4, {"a": awa.PoolMember(1, 1)})
    before = _fleet_rows(db)
    with pytest.raises(awa.MinWorkersExceedGlobal) as too_many:
        await client.set_fleet_pool(3, {"a": awa.PoolMember(2), "b": awa.PoolMember(2)})
    assert "the pool total (3)" in str(too_many.value)
    for total, queues, field in [
        (0, {"a": awa.PoolMember()}, "total"),
        (3, {}, "queues"),
        (3, {"a": awa.PoolMember(weight=0)}, "queues['a'].weight"),
        (3, {"a": awa.PoolMember(weight=2**31)}, "queues['a'].weight"),  # a PostgreSQL integer
        (3, {"a": awa.PoolMember(min_workers=-1)}, "queues['a'].min_workers"),
        (3, {"a": {"weight": 2}}, "queues['a']"),
        (3, {"": awa.PoolMember()}, "queues"),
    ]:
        with pytest.raises(awa.ValidationError) as caught:
            await client.set_fleet_pool(total, queues)
        assert caught.value.field == field
    assert _fleet_rows(db) == before


async def test_status_reports_what_the_fleet_runs(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("t", concurrency=2, partition_by="tenant")
    await client.set_queue_limits("r", rate_limit=4.0)
    await client.insert_many(
        [{"tenant": "a"}, {"tenant": "a"}, {"tenant": "b"}, {}], kind="k", queue="t"
    )
    # A claimer takes what the per-key cap allows: a twice, b and the keyless once each.
    rows = db.execute("SELECT id, blocked FROM awa.claim_coordinated('t', 10, 0, 'on')").fetchall()
    assert len([r for r in rows if r[0] is not None]) == 4
    status = {s.limits.queue: s for s in await client.queue_limits_status()}
    assert status["t"].running == 4
    assert status["t"].top_partitions == [("a", 2), ("", 1), ("b", 1)]
    assert status["r"].running == 0 and status["r"].tokens is None  # no bucket yet
    (only_r,) = await client.queue_limits_status("r")
    assert only_r.limits.rate_limit == 4.0


async def test_the_pool_is_whole_state_and_reports_running_members(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    pool = await client.set_fleet_pool(
        10, {"a": awa.PoolMember(min_workers=2, weight=3), "b": awa.PoolMember()}
    )
    assert (pool.total, pool.running) == (10, {"a": 0, "b": 0})
    await client.insert_many([{}] * 3, kind="k", queue="a")
    db.execute("SELECT * FROM awa.claim_coordinated('a', 2, 0, 'on')")
    pool = await client.set_fleet_pool(6, {"a": awa.PoolMember(min_workers=1)})
    assert pool.queues == {"a": awa.PoolMember(1, 1)} and pool.running == {"a": 2}
    assert await client.fleet_pool() == pool
    assert await client.clear_fleet_pool() is True
    assert await client.fleet_pool() is None
    assert await client.clear_fleet_pool() is False


async def test_a_pool_write_that_loses_a_deadlock_tries_again(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A claim writes a member's demand signal before it takes the pool's lock; one riding
    on a completion may then wait for that lock while holding the member row the pool
    writer updates. When deadlock detection ends the writer, the (whole-state) write is
    tried again instead of failing the operator's call (a review's repro)."""
    members = {"a": awa.PoolMember(weight=1), "b": awa.PoolMember(weight=1)}
    await client.set_fleet_pool(2, members)
    async with await psycopg.AsyncConnection.connect(database_url) as claim:
        await claim.execute("UPDATE awa.fleet_pool_members SET asked_at = now() WHERE queue = 'a'")
        write = asyncio.create_task(client.set_fleet_pool(5, members))

        async def writer_waits_for_the_row() -> bool:
            row = db.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%%fleet_pool_set%%'"
            ).fetchone()
            return write.done() or (row is not None and row[0] == 1)

        await wait_for(writer_waits_for_the_row)
        # The claim now waits for the pool's lock the writer holds: a cycle, which deadlock
        # detection breaks by ending the writer (it waited first).
        await claim.execute("SELECT pg_advisory_xact_lock(1635213680, 0)")
        await claim.commit()
        pool = await asyncio.wait_for(write, timeout=30)
    assert pool.total == 5


async def test_set_fleet_pool_returns_what_it_wrote_whatever_a_concurrent_clear_does(
    client: awa.AsyncClient,
    database_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool was read back after the write's transaction: a clear landing in between
    left nothing to read (an AssertionError, a review). Here a clear is let loose just
    before the read back: it now waits for the write's transaction."""
    from awa.client import fleet

    read = fleet.fleet_pool
    other = awa.AsyncClient(database_url)
    clearing: list[asyncio.Task[bool]] = []

    async def clear_then_read(conn: Any) -> Any:
        if not clearing:
            clearing.append(asyncio.create_task(other.clear_fleet_pool()))

            async def cleared_or_waiting() -> bool:
                waiting = db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND pid <> pg_backend_pid()"
                ).fetchone()
                db.commit()
                return clearing[0].done() or (waiting is not None and waiting[0] > 0)

            await wait_for(cleared_or_waiting)
        return await read(conn)

    monkeypatch.setattr(fleet, "fleet_pool", clear_then_read)
    async with other:
        pool = await client.set_fleet_pool(4, {"a": awa.PoolMember(1, 1)})
        assert pool.total == 4 and set(pool.queues) == {"a"}
        assert await asyncio.wait_for(clearing[0], timeout=15)  # then it cleared the pool
