"""Control rows written by hand in SQL (migration 0035): what an operator's script writes
into awa's control tables either takes effect as the API's writes do or is refused at
write; it never stops a queue. (A paused row left open in a transaction: test_pause_gate.)
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa
from awa.config import QueueConfig
from awa.worker.control import QueueControl, minimums_refusal

CLAIM = "SELECT id FROM awa.claim(%s, 10, 0, 'on')"


def test_a_deadline_override_past_int32_is_refused_at_write(db: psycopg.Connection[Any]) -> None:
    """9.2e15 ms and more made every claim of the queue fail ("interval out of range")."""
    with pytest.raises(psycopg.errors.CheckViolation, match="override_deadline_ms_max"):
        db.execute(
            "INSERT INTO awa.queue_meta (queue, override_deadline_ms) "
            "VALUES ('q', 9223372036854775807)"
        )
    db.rollback()
    db.execute("INSERT INTO awa.queue_meta (queue, override_deadline_ms) VALUES ('q', 2147483647)")


async def test_a_minimum_written_by_hand_queues_behind_one_in_force(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Conflicting minimums are taken in write order; a row written by hand had no stamp,
    sorted first and displaced the minimum the API had put in force."""
    await client.set_runtime_overrides("a", min_workers=5)
    db.execute("INSERT INTO awa.queue_meta (queue, override_min_workers) VALUES ('b', 3)")
    db.commit()
    rows = {
        r["queue"]: r
        for r in db.cursor(row_factory=dict_row).execute("SELECT * FROM awa.queue_meta")
    }
    controls = [
        QueueControl(QueueConfig(name, min_workers=m, weight=1), weighted=True)
        for name, m in (("a", 2), ("b", 1))
    ]
    refused = minimums_refusal(controls, rows, global_max_workers=6)
    assert set(refused) == {"b"}, refused


def test_a_minimum_changed_by_hand_is_stamped_and_an_unchanged_one_keeps_its_stamp(
    db: psycopg.Connection[Any],
) -> None:
    db.execute("INSERT INTO awa.queue_meta (queue, override_min_workers) VALUES ('a', 3)")
    db.commit()
    (first,) = db.execute(
        "SELECT override_min_workers_at FROM awa.queue_meta WHERE queue = 'a'"
    ).fetchone() or (None,)
    assert first is not None
    db.execute("UPDATE awa.queue_meta SET paused = true, override_min_workers = 3")
    db.commit()
    same = db.execute("SELECT override_min_workers_at FROM awa.queue_meta").fetchone()
    db.execute("UPDATE awa.queue_meta SET override_min_workers = 4")
    db.commit()
    moved = db.execute("SELECT override_min_workers_at FROM awa.queue_meta").fetchone()
    db.execute("UPDATE awa.queue_meta SET override_min_workers = NULL")
    cleared = db.execute("SELECT override_min_workers_at FROM awa.queue_meta").fetchone()
    assert same == (first,)
    assert moved is not None and moved[0] > first
    assert cleared == (None,)


async def test_deleting_the_pool_by_hand_frees_its_members(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A member row left behind held its queue back for good (room 0 in no pool)."""
    job = await client.insert({}, kind="k", queue="q")
    await client.set_fleet_pool(3, {"q": awa.PoolMember(1, 1)})
    db.execute("DELETE FROM awa.fleet_pool")
    db.commit()
    assert db.execute("SELECT count(*) FROM awa.fleet_pool_members").fetchone() == (0,)
    assert await client.fleet_pool() is None
    db.autocommit = True
    assert [r[0] for r in db.execute(CLAIM, ("q",)).fetchall()] == [job.id]


def test_a_member_without_a_pool_is_refused_at_write(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="fleet_pool_members_pool_fkey"):
        db.execute("INSERT INTO awa.fleet_pool_members (queue) VALUES ('q')")


async def test_the_pool_and_its_members_are_still_written_and_cleared_together(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """fleet_pool_set writes the pool and its members in one statement: the foreign key
    (checked at its end) accepts the members of a pool created by the same statement."""
    await client.set_fleet_pool(4, {"a": awa.PoolMember(1, 1), "b": awa.PoolMember(0, 2)})
    pool = await client.fleet_pool()
    assert pool is not None and set(pool.queues) == {"a", "b"}
    assert await client.clear_fleet_pool()
    assert db.execute("SELECT count(*) FROM awa.fleet_pool_members").fetchone() == (0,)
