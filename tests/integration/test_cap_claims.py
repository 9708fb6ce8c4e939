"""A queue at its fleet-wide concurrency cap is answered without the queue's lock (ADR 0039).

Only a claim that may start something queues for the queue's lock; one that would only
learn "full" is told so from an unlocked count. A partitioned cap (a cap per key) and a
paused queue keep their answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import awa


def _claim(db: psycopg.Connection[Any], queue: str, limit: int = 4) -> list[Any]:
    return db.execute(
        "SELECT id, blocked FROM awa.claim(%s, %s, 0, 'on')", (queue, limit)
    ).fetchall()


@contextmanager
def _queue_lock_held(database_url: str, db: psycopg.Connection[Any], queue: str) -> Iterator[None]:
    """Another session holds ``queue``'s claim lock; ``db`` waits at most 2 s for it."""
    with psycopg.connect(database_url, autocommit=True) as holder, holder.transaction():
        holder.execute("SELECT pg_advisory_xact_lock(1635213681, hashtext(%s))", (queue,))
        db.execute("SET lock_timeout = '2s'")
        try:
            yield
        finally:
            db.execute("RESET lock_timeout")


def _finish_one(db: psycopg.Connection[Any], queue: str) -> None:
    db.execute(
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = "
        "(SELECT min(id) FROM awa.jobs WHERE queue = %s AND state = 'running')",
        (queue,),
    )


async def test_a_full_queue_is_told_so_without_waiting_for_its_lock(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("c", concurrency=2)
    await client.insert_many([{}] * 6, kind="k", queue="c")
    assert len([r for r in _claim(db, "c") if r[0] is not None]) == 2
    with _queue_lock_held(database_url, db, "c"):
        assert _claim(db, "c") == [(None, "concurrency")]  # at once, lock or no lock
        _finish_one(db, "c")  # room: taking it needs the lock
        with pytest.raises(psycopg.errors.LockNotAvailable):
            _claim(db, "c")
    assert len([r for r in _claim(db, "c") if r[0] is not None]) == 1


async def test_a_paused_full_queue_still_answers_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("c", concurrency=1)
    await client.insert_many([{}] * 3, kind="k", queue="c")
    assert len([r for r in _claim(db, "c") if r[0] is not None]) == 1
    await client.pause_queue("c")
    assert _claim(db, "c") == []  # paused: no rows, not a cap hold


async def test_a_cap_per_key_still_decides_under_the_lock(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("p", concurrency=1, partition_by="tenant")
    await client.insert_many([{"tenant": "x"}] * 3, kind="k", queue="p")
    assert len([r for r in _claim(db, "p") if r[0] is not None]) == 1
    # The queue as a whole runs 1 = the per-key cap, yet another key could start: only
    # the locked claim can tell, so it waits for the lock.
    with _queue_lock_held(database_url, db, "p"), pytest.raises(psycopg.errors.LockNotAvailable):
        _claim(db, "p")
