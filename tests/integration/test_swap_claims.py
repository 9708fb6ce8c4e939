"""A completion re-fills the slots it frees without the fleet's locks (ADR 0040).

A claim riding on a completion (``awa.complete_and_claim``) may take, without the queue's
lock or the pool's, as many jobs of a capped queue or a pool member as the same
transaction finished of it: the running count is the same before and after its commit.
Anything beyond that, a lowered cap, a member past its share, a rate limit, a cap per
key, is still decided as before. Each test holds the lock(s) in another session, so a
claim that queued for them fails with ``LockNotAvailable`` instead of waiting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import running_jobs

QUEUE_LOCK = "SELECT pg_advisory_xact_lock(1635213681, hashtext(%s))"
POOL_LOCK = "SELECT pg_advisory_xact_lock(1635213680, 0)"

Claimed = tuple[int, int, Any]  # id, run_lease, attempted_at


def _claim(db: psycopg.Connection[Any], queue: str, limit: int) -> list[Claimed]:
    rows = db.execute(
        "SELECT id, run_lease, attempted_at FROM awa.claim(%s, %s, 0, 'on', 'me', 0)"
        " WHERE id IS NOT NULL",
        (queue, limit),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def _claimed_as(db: psycopg.Connection[Any], ids: list[int]) -> list[Claimed]:
    """What completing the jobs ``ids`` takes: their current attempt."""
    rows = db.execute(
        "SELECT id, run_lease, attempted_at FROM awa.jobs WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def _complete_and_claim(
    db: psycopg.Connection[Any], done: list[Claimed], queue: str, limit: int, held: int = 0
) -> tuple[list[int], list[str | None]]:
    """Complete ``done`` and ride a claim of ``limit``; (claimed ids, hold reasons)."""
    outcomes = [
        {"id": i, "run_lease": lease, "attempted_at": at.isoformat(), "state": "completed"}
        for i, lease, at in done
    ]
    claims = [{"queue": queue, "limit": limit, "deadline_ms": 0, "instance": "me", "held": held}]
    rows = db.execute(
        "SELECT row_type, id, blocked FROM awa.complete_and_claim(%s::jsonb, 'on', %s::jsonb)",
        (json.dumps(outcomes), json.dumps(claims)),
    ).fetchall()
    assert len([r for r in rows if r[0] == "applied"]) == len(done)
    claimed = [r[1] for r in rows if r[0] == "claimed" and r[1] is not None]
    holds = [r[2] for r in rows if r[0] == "claimed" and r[1] is None]
    return claimed, holds


@contextmanager
def _locks_held(
    database_url: str, db: psycopg.Connection[Any], *locks: tuple[str, tuple[Any, ...]]
) -> Iterator[None]:
    """Another session holds ``locks``; ``db`` waits at most 2 s for any lock."""
    with psycopg.connect(database_url, autocommit=True) as holder, holder.transaction():
        for statement, params in locks:
            holder.execute(statement, params)  # type: ignore[arg-type]
        db.execute("SET lock_timeout = '2s'")
        try:
            yield
        finally:
            db.execute("RESET lock_timeout")


async def test_a_capped_queue_refills_what_it_freed_while_another_holds_its_lock(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("c", concurrency=2)
    await client.insert_many([{}] * 6, kind="k", queue="c")
    running = _claim(db, "c", 4)
    assert len(running) == 2
    with _locks_held(database_url, db, (QUEUE_LOCK, ("c",))):
        claimed, holds = _complete_and_claim(db, running[:1], "c", 1)
        assert len(claimed) == 1 and holds == []
        # Asking for more than it freed: the swap's one, then "full" without the lock.
        claimed, holds = _complete_and_claim(db, _claimed_as(db, claimed), "c", 3)
        assert len(claimed) == 1 and holds == ["concurrency"]
    assert running_jobs(db, "c") == 2


async def test_a_lowered_cap_is_not_refilled(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("c", concurrency=3)
    await client.insert_many([{}] * 6, kind="k", queue="c")
    running = _claim(db, "c", 3)
    await client.set_queue_limits("c", concurrency=1)
    with _locks_held(database_url, db, (QUEUE_LOCK, ("c",))):
        claimed, holds = _complete_and_claim(db, running[:1], "c", 1)
    # Two still run against a cap of one: the freed slot drains the excess.
    assert claimed == [] and holds == ["concurrency"]
    assert running_jobs(db, "c") == 2


async def test_a_pool_member_refills_what_it_freed_while_others_hold_the_locks(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_fleet_pool(2, {"a": awa.PoolMember()})
    await client.insert_many([{}] * 6, kind="k", queue="a")
    running = _claim(db, "a", 4)
    assert len(running) == 2
    with _locks_held(database_url, db, (POOL_LOCK, ()), (QUEUE_LOCK, ("a",))):
        claimed, holds = _complete_and_claim(db, running[:2], "a", 2)
    assert len(claimed) == 2 and holds == []
    assert running_jobs(db, "a") == 2


async def test_a_member_past_its_share_does_not_refill(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_fleet_pool(4, {"a": awa.PoolMember(), "b": awa.PoolMember()})
    await client.insert_many([{}] * 6, kind="k", queue="a")
    running = _claim(db, "a", 4)
    assert len(running) == 4  # alone, a took the whole pool
    await client.insert_many([{}] * 2, kind="k", queue="b")
    db.execute("UPDATE awa.fleet_pool_members SET asked_at = now() WHERE queue = 'b'")
    # b asks: a's share is 2 of 4, so the slot a frees is not re-filled by a.
    with _locks_held(database_url, db, (POOL_LOCK, ()), (QUEUE_LOCK, ("a",))):
        claimed, holds = _complete_and_claim(db, running[:1], "a", 1, held=3)
    assert claimed == [] and holds == ["pool"]
    assert running_jobs(db, "a") == 3


@pytest.mark.parametrize(
    "limits", [{"concurrency": 2, "rate_limit": 100.0}, {"concurrency": 2, "partition_by": "t"}]
)
async def test_what_only_the_lock_decides_still_waits_for_it(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str, limits: dict[str, Any]
) -> None:
    await client.set_queue_limits("c", **limits)
    await client.insert_many([{"t": "x"}, {"t": "y"}, {"t": "z"}], kind="k", queue="c")
    running = _claim(db, "c", 2)
    assert len(running) == 2
    with (
        _locks_held(database_url, db, (QUEUE_LOCK, ("c",))),
        pytest.raises(psycopg.errors.LockNotAvailable),
    ):
        _complete_and_claim(db, running[:1], "c", 1)


def _notices_until_sentinel(
    listener: psycopg.Connection[Any], db: psycopg.Connection[Any]
) -> list[str]:
    """The ``freed`` notices committed before a sentinel sent now (commit order)."""
    db.execute("SELECT pg_notify('awa_control', 'sentinel')")
    payloads = []
    for notice in listener.notifies(timeout=10):
        if notice.payload == "sentinel":
            return payloads
        if "freed" in json.loads(notice.payload):
            payloads.append(notice.payload)
    raise AssertionError(f"no sentinel; saw {payloads}")


async def test_slots_refilled_in_the_same_commit_are_not_announced(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("c", concurrency=3)
    await client.insert_many([{}] * 8, kind="k", queue="c")
    running = _claim(db, "c", 3)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN awa_control")
        claimed, _ = _complete_and_claim(db, running[:1], "c", 1)
        assert len(claimed) == 1
        # Nothing left free: the other processes need not wake for it.
        assert _notices_until_sentinel(listener, db) == []
        await client.set_queue_limits("c", concurrency=1)
        claimed, _ = _complete_and_claim(db, running[1:2], "c", 1)
        assert claimed == []
        # Not re-filled (the cap was lowered): announced as before.
        assert [json.loads(p) for p in _notices_until_sentinel(listener, db)] == [{"freed": "c"}]
