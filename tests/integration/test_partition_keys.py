"""Partition keys given at insert (ADR 0010): a job of a partitioned queue is keyed when it
is inserted, so no backlog waiting for adoption stands in front of it, and a change of
partition_by waits for inserts in flight, then re-keys their jobs like any other."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
from awa import bridge
from tests.helpers import wait_for


def _claim(db: psycopg.Connection[Any], queue: str, limit: int) -> list[str]:
    rows = db.execute(
        "SELECT args ->> 'k' FROM awa.claim(%s, %s, 0, 'on') WHERE id IS NOT NULL",
        (queue, limit),
    ).fetchall()
    return sorted(row[0] for row in rows)


async def test_a_job_behind_a_backlog_not_yet_adopted_is_claimed_at_once(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("p", concurrency=1, partition_by="k")
    # More than one claim adopts (10 000): copied in bulk, not keyed at insert.
    await client.insert_many([{"k": "hot"}] * 10_050, kind="k", queue="p")
    await client.insert({"k": "cold"}, kind="k", queue="p")
    # One claim: the hot key's first job and the cold key's, not the hot key's alone.
    assert _claim(db, "p", 2) == ["cold", "hot"]


async def test_a_partition_by_change_waits_for_an_insert_in_flight_and_rekeys_its_job(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("p", concurrency=1, partition_by="k")
    with psycopg.connect(database_url) as producer:  # a transaction left open
        job = bridge.insert_job(producer, {"k": "a", "j": "b"}, kind="k", queue="p")
        assert isinstance(job, awa.Job)
        change = asyncio.create_task(client.set_queue_limits("p", concurrency=1, partition_by="j"))

        async def waiting_for_the_insert() -> bool:
            row = db.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%%FOR NO KEY UPDATE%%'"
            ).fetchone()
            return row is not None and row[0] == 1

        await wait_for(waiting_for_the_insert)
        assert not change.done()
        producer.commit()
    await change
    (key,) = db.execute("SELECT partition_key FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
    assert key is None  # back to adoption, keyed by the new partition_by at its claim
    assert _claim(db, "p", 1) == ["a"]
    assert db.execute("SELECT partition_key FROM awa.jobs WHERE id = %s", (job.id,)).fetchone() == (
        "b",
    )
