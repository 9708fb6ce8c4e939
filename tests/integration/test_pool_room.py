"""The fleet pool's arithmetic and its ``freed`` notices, at the SQL level (ADR 0035).

``awa.pool_room`` answers how many more jobs a member may start now; the completion
statement (``awa.complete_and_claim``) tells the fleet about freed slots only when
somebody could use them.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

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
    # Ideal 10, 3.33 and 6.67: rounding each part up (as before) gave 10 + 4 + 7 = 21.
    assert {q: _room(db, q) for q in members} == {"a": 10, "b": 3, "c": 7}
    # Equal remainders: the leftover slot goes by queue name, still summing to the pool.
    await client.set_fleet_pool(7, {"x": awa.PoolMember(), "y": awa.PoolMember()})
    _asking(db, "x", "y")
    assert (_room(db, "x"), _room(db, "y")) == (4, 3)
    # Alone, a member may use the whole pool; a stranger to the pool gets no answer.
    await client.set_fleet_pool(7, {"x": awa.PoolMember(), "z": awa.PoolMember(weight=5)})
    assert _room(db, "x") == 7
    assert _room(db, "nobody") is None


def _finish_and_ride(
    db: psycopg.Connection[Any], job_ids: list[int], ride: str | None
) -> list[str]:
    """Complete ``job_ids`` in one statement (with a claim riding for ``ride``) and return
    the ``freed`` notices it sent."""
    outcomes = []
    for job_id in job_ids:
        row = db.execute(
            "SELECT run_lease, attempted_at FROM awa.jobs WHERE id = %s", (job_id,)
        ).fetchone()
        assert row is not None
        outcomes.append({"id": job_id, "run_lease": row[0], "attempted_at": row[1].isoformat(),
                         "state": "completed"})  # fmt: skip
    claims = None if ride is None else [{"queue": ride, "limit": 10, "deadline_ms": 0}]
    db.execute("LISTEN awa_control")
    db.execute(
        "SELECT count(*) FROM awa.complete_and_claim(%s::jsonb, 'on', %s::jsonb)",
        (json.dumps(outcomes), None if claims is None else json.dumps(claims)),
    )
    freed = [
        json.loads(n.payload)["freed"]
        for n in db.notifies(timeout=0.1)  # own notices arrive with the result
        if "freed" in json.loads(n.payload)
    ]
    db.execute("UNLISTEN awa_control")
    return sorted(freed)


def _claim(db: psycopg.Connection[Any], queue: str, limit: int) -> list[int]:
    rows = db.execute(
        "SELECT id FROM awa.claim(%s, %s, 0, 'on') WHERE id IS NOT NULL", (queue, limit)
    ).fetchall()
    return [row[0] for row in rows]


async def test_freed_is_announced_only_when_the_slots_can_be_used(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_fleet_pool(4, {"a": awa.PoolMember(), "b": awa.PoolMember()})
    await client.insert_many([{}] * 10, kind="k", queue="a")
    running = _claim(db, "a", 4)
    assert len(running) == 4  # b has no jobs: a alone fills the pool
    # The riding claim re-fills the pool under its lock: nobody else could claim.
    assert _finish_and_ride(db, running[:2], ride="a") == []
    # No riding claim: the slots are free for whoever wants them.
    assert _finish_and_ride(db, running[2:], ride=None) == ["a", "b"]
    # b gets jobs and asks while a fills the pool: a's rider now takes only its share of
    # the slots it freed, and the rest is announced.
    assert len(_claim(db, "a", 4)) == 2
    await client.insert_many([{}] * 10, kind="k", queue="b")
    assert _claim(db, "b", 4) == []  # held back: the pool is full (b's ask is recorded)
    running = [row[0] for row in db.execute(
        "SELECT id FROM awa.jobs WHERE queue = 'a' AND state = 'running'"
    ).fetchall()]  # fmt: skip
    assert _finish_and_ride(db, running, ride="a") == ["a", "b"]
    assert len(_claim(db, "b", 4)) == 2  # its share of 4 at weights 1:1
