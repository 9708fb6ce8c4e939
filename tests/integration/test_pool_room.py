"""The fleet pool's arithmetic and its lock, at the SQL level (ADR 0035).

``awa.pool_room`` answers how many more jobs a member may start now; a member's claim
with no room is answered without queueing for the pool's lock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa


def _room(db: psycopg.Connection[Any], queue: str) -> int | None:
    row = db.execute("SELECT awa.pool_room(%s, now())", (queue,)).fetchone()
    assert row is not None
    return row[0]


def _asking(db: psycopg.Connection[Any], *queues: str) -> None:
    """Members with available jobs that asked just now."""
    for queue in queues:
        db.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', %s)", (queue,))
        db.execute("UPDATE awa.fleet_pool_members SET asked_at = now() WHERE queue = %s", (queue,))


async def test_the_overflow_is_split_by_largest_remainder_and_sums_to_the_pool(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    members = {"a": awa.PoolMember(weight=3), "b": awa.PoolMember(), "c": awa.PoolMember(weight=2)}
    await client.set_fleet_pool(20, members)
    _asking(db, "a", "b", "c")
    # Ideal 10, 3.33 and 6.67: rounding each part up (as before) gave 10 + 4 + 7 = 21. One
    # slot each first (0022), then 17 by weight: 8.5, 2.83, 5.67 → 8, 3, 6 (largest
    # remainders), each within one slot of its ideal, the same as FleetPool.busy_shares.
    assert {q: _room(db, q) for q in members} == {"a": 9, "b": 4, "c": 7}
    assert awa.FleetPool(20, members, datetime.now(UTC)).busy_shares() == {"a": 9, "b": 4, "c": 7}
    # Equal remainders: the leftover slot goes by queue name, still summing to the pool.
    await client.set_fleet_pool(7, {"x": awa.PoolMember(), "y": awa.PoolMember()})
    _asking(db, "x", "y")
    assert (_room(db, "x"), _room(db, "y")) == (4, 3)
    # Alone, a member may use the whole pool; a stranger to the pool gets no answer.
    await client.set_fleet_pool(7, {"x": awa.PoolMember(), "z": awa.PoolMember(weight=5)})
    assert _room(db, "x") == 7
    assert _room(db, "nobody") is None


async def test_a_light_member_with_work_is_not_starved_by_a_heavy_one(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A pool of 2, weights 1 and 4: by largest remainder alone the light member's 0.4 of
    a slot came to nothing for as long as the heavy one had work. With a slot for each
    member first, each gets one (session 24's review)."""
    await client.set_fleet_pool(2, {"qa": awa.PoolMember(), "qb": awa.PoolMember(weight=4)})
    _asking(db, "qa", "qb")
    assert (_room(db, "qa"), _room(db, "qb")) == (1, 1)
    # More members asking than slots to share: somebody must wait, as before.
    await client.set_fleet_pool(2, {"x": awa.PoolMember(), "y": awa.PoolMember(),
                                     "z": awa.PoolMember(weight=4)})  # fmt: skip
    _asking(db, "x", "y", "z")
    assert [_room(db, q) for q in ("x", "y", "z")] == [1, 0, 1]  # ties by queue name


def _claim(db: psycopg.Connection[Any], queue: str, limit: int) -> list[int]:
    rows = db.execute(
        "SELECT id FROM awa.claim(%s, %s, 0, 'on') WHERE id IS NOT NULL", (queue, limit)
    ).fetchall()
    return [row[0] for row in rows]


def _hold(db: psycopg.Connection[Any], queue: str) -> str | None:
    row = db.execute(
        "SELECT blocked FROM awa.claim(%s, 4, 0, 'on') WHERE id IS NULL", (queue,)
    ).fetchone()
    return None if row is None else row[0]


async def test_a_member_without_room_is_answered_without_waiting_for_the_pools_lock(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_fleet_pool(4, {"a": awa.PoolMember(), "b": awa.PoolMember()})
    await client.insert_many([{}] * 10, kind="k", queue="a")
    assert len(_claim(db, "a", 4)) == 4  # b has no jobs: a alone fills the pool
    await client.insert_many([{}] * 10, kind="k", queue="b")
    with psycopg.connect(database_url, autocommit=True) as holder:
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(1635213680, 0)")  # the pool's lock
            db.execute("SET lock_timeout = '2s'")
            # No room for b (a runs the whole pool): told so at once, and its ask recorded.
            assert _hold(db, "b") == "pool"
            asked = db.execute(
                "SELECT asked_at IS NOT NULL FROM awa.fleet_pool_members WHERE queue = 'b'"
            ).fetchone()
            assert asked == (True,)
            # Room (a job of a finished): a claim must wait for the lock to take it.
            db.execute(
                "UPDATE awa.jobs SET state = 'completed', finalized_at = now() "
                "WHERE id = (SELECT min(id) FROM awa.jobs WHERE state = 'running')"
            )
            with pytest.raises(psycopg.errors.LockNotAvailable):
                _claim(db, "b", 4)
        db.execute("RESET lock_timeout")
    assert len(_claim(db, "b", 4)) == 1  # the lock released: b takes the freed slot


def _serving(db: psycopg.Connection[Any], instance: str, queues: dict[str, int]) -> None:
    """A live runtime instance whose snapshot lists ``queues`` with their max_workers."""
    snapshot = {"queues": {q: {"capacity": {"max_workers": n}} for q, n in queues.items()}}
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,"
        " last_seen_at, snapshot) VALUES (%s, 'h', 1, now(), now(), %s)",
        (instance, Jsonb(snapshot)),
    )


def _serving_weighted(
    db: psycopg.Connection[Any], instance: str, queue: str, ceiling: int, **now: int
) -> None:
    """A live weighted-mode instance: its capacity has no max_workers, only a ceiling.
    ``now`` (absent from older snapshots): ``global_max_workers``, ``in_flight`` of
    ``queue`` and ``elsewhere``, what its other queue runs."""
    capacity = {"mode": "weighted", "min_workers": 0, "weight": 1, "overflow_held": 0,
                "ceiling": ceiling}  # fmt: skip
    queues: dict[str, Any] = {queue: {"capacity": capacity}}
    if now:
        queues[queue]["in_flight"] = now["in_flight"]
        queues["other"] = {"capacity": capacity, "in_flight": now["elsewhere"]}
    snapshot = {"queues": queues, "global_max_workers": now.get("global_max_workers")}
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,"
        " last_seen_at, snapshot) VALUES (%s, 'h', 1, now(), now(), %s)",
        (instance, Jsonb(snapshot)),
    )


def _claim_as(db: psycopg.Connection[Any], queue: str, instance: str, held: int) -> list[Any]:
    return db.execute(
        "SELECT id, blocked FROM awa.claim(%s, 16, 0, 'on', %s, %s)", (queue, instance, held)
    ).fetchall()


async def test_a_members_share_is_split_over_the_processes_serving_it(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    me, other = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
    await client.set_fleet_pool(9, {"a": awa.PoolMember()})
    await client.insert_many([{}] * 40, kind="k", queue="a")
    _serving(db, me, {"a": 16})
    _serving(db, other, {"a": 16})
    # Two processes serve a: this one's part of the 9 is 5, and the claim says it was cut
    # there: ``pool_part``, so slots freed elsewhere need not wake it (ADR 0038).
    rows = _claim_as(db, "a", me, 0)
    assert len([r for r in rows if r[0] is not None]) == 5
    assert rows[-1] == (None, "pool_part")
    # Holding its 5, it is told to wait, though 4 slots of the pool are free.
    assert _claim_as(db, "a", me, 5) == [(None, "pool_part")]
    # The other process takes the rest of the share; then the pool is full, which is a
    # plain ``pool`` hold for anyone below their part.
    assert len([r for r in _claim_as(db, "a", other, 0) if r[0] is not None]) == 4
    db.execute("DELETE FROM awa.runtime_instances WHERE instance_id = %s", (other,))
    assert _claim_as(db, "a", me, 0) == [(None, "pool")]
    # Without a process named (an older client, or by hand), the pool alone decides.
    db.execute("UPDATE awa.jobs SET state = 'completed' WHERE state = 'running'")
    assert len(_claim(db, "a", 16)) == 9


async def test_a_process_takes_what_the_others_lack_the_workers_to_run(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    me, small = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000c"
    await client.set_fleet_pool(9, {"a": awa.PoolMember()})
    await client.insert_many([{}] * 40, kind="k", queue="a")
    _serving(db, me, {"a": 16})
    _serving(db, small, {"a": 2})  # can run at most 2 of a's jobs
    rows = _claim_as(db, "a", me, 0)
    assert len([r for r in rows if r[0] is not None]) == 7  # 9 − the other's 2
    # A process whose row went stale (crashed, not yet pruned) no longer counts.
    db.execute("UPDATE awa.runtime_instances SET last_seen_at = now() - interval '1 minute'")
    db.execute("UPDATE awa.jobs SET state = 'completed' WHERE state = 'running'")
    assert len([r for r in _claim_as(db, "a", me, 0) if r[0] is not None]) == 9


async def test_a_weighted_process_counts_as_no_more_than_it_can_run(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    me, weighted = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000d"
    await client.set_fleet_pool(10, {"a": awa.PoolMember()})
    await client.insert_many([{}] * 40, kind="k", queue="a")
    _serving(db, me, {"a": 20})
    _serving_weighted(db, weighted, "a", 3)  # global_max_workers 3: at most 3 of a's jobs
    rows = _claim_as(db, "a", me, 0)
    assert len([r for r in rows if r[0] is not None]) == 7  # 10 − 3, not an even 5


@pytest.mark.parametrize(("in_flight", "elsewhere", "mine"), [(0, 4, 8), (1, 3, 7), (0, 0, 4)])
async def test_a_weighted_process_holds_back_no_more_than_it_can_take_now(
    in_flight: int,
    elsewhere: int,
    mine: int,
    client: awa.AsyncClient,
    db: psycopg.Connection[Any],
) -> None:
    """A weighted process whose global permits another queue holds kept a full part of the
    member it could not run: the pool of 8 ran 4 with jobs waiting, for as long as that
    queue kept the permits (a review). It holds back what it runs of the member plus its
    global permits nobody holds."""
    me, weighted = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000d"
    await client.set_fleet_pool(8, {"a": awa.PoolMember()})
    await client.insert_many([{}] * 40, kind="k", queue="a")
    _serving(db, me, {"a": 10})
    _serving_weighted(
        db, weighted, "a", 4, global_max_workers=4, in_flight=in_flight, elsewhere=elsewhere
    )
    rows = _claim_as(db, "a", me, 0)
    assert len([r for r in rows if r[0] is not None]) == mine


async def test_another_queues_idle_minimum_is_not_the_members_to_take(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """0039 counted a weighted process's free permits as global_max_workers less what its
    queues run: another queue's idle minimum counted as the member's, and with the
    overflow held by a queue outside the pool, a pool of 8 ran 4 again (a review)."""
    me, weighted = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000d"
    await client.set_fleet_pool(8, {"a": awa.PoolMember()})
    await client.insert_many([{}] * 40, kind="k", queue="a")
    _serving(db, me, {"a": 10})

    def weighted_queue(min_workers: int, in_flight: int) -> dict[str, Any]:
        capacity = {"mode": "weighted", "min_workers": min_workers, "weight": 1,
                    "overflow_held": max(0, in_flight - min_workers), "ceiling": 4}  # fmt: skip
        return {"capacity": capacity, "in_flight": in_flight}

    snapshot = {
        "global_max_workers": 8,
        "queues": {"a": weighted_queue(0, 0), "idle": weighted_queue(4, 0),
                   "hog": weighted_queue(0, 4)},
    }  # fmt: skip
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at,"
        " last_seen_at, snapshot) VALUES (%s, 'h', 1, now(), now(), %s)",
        (weighted, Jsonb(snapshot)),
    )
    rows = _claim_as(db, "a", me, 0)
    assert len([r for r in rows if r[0] is not None]) == 8


def _jobs_seq_scans_in(db: psycopg.Connection[Any], statement: str, *params: Any) -> int:
    """Sequential scans of awa.jobs made by ``statement`` (this transaction's counters)."""
    with db.transaction():
        db.execute(statement, params)
        row = db.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'awa' AND relname = 'jobs'"
        ).fetchone()
    return 0 if row is None else int(row[0])


async def test_the_available_probes_walk_the_claim_indexes_whatever_the_statistics(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """With most rows available, an EXISTS probe's generic plan is a sequential scan that
    reads every row stored before the queue's first job (one per member per pool claim):
    the probes must stay index scans (migration 0013)."""
    await client.set_fleet_pool(8, {"a": awa.PoolMember(weight=3), "b": awa.PoolMember()})
    await client.insert_many([{}] * 3_000, kind="k", queue="a")
    await client.insert_many([{}] * 1_000, kind="k", queue="b")
    db.execute("UPDATE awa.fleet_pool_members SET asked_at = now()")
    db.execute("ANALYZE awa.jobs")
    db.execute("SET plan_cache_mode = force_generic_plan")  # as the hot path's functions run
    for _ in range(6):  # past the plan cache's five custom plans
        assert _jobs_seq_scans_in(db, "SELECT awa.pool_room('a', now())") == 0
        assert _jobs_seq_scans_in(db, "SELECT count(*) FROM awa.claim('b', 0, 0, 'on')") == 0
    assert _room(db, "a") == 6  # and the answer is the weighted share: 8 x 3/4
