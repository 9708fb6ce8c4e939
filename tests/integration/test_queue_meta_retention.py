"""A queue's control row lives only while it holds something (a pause, an override, the
DLQ flag): a review's per-tenant churn left a row for every queue ever paused, listed by
queue_stats(), `awa queue list`, the dashboard and /metrics for ever (18 a minute)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
from tests.helpers import noop_task, statements_running, wait_for


def _rows(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    db.commit()
    return db.execute(
        "SELECT queue, paused, dlq, override_rate_limit FROM awa.queue_meta ORDER BY queue"
    ).fetchall()


async def test_a_resume_that_leaves_nothing_deletes_the_row(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.pause_queue("tenant-1", paused_by="ops")
    assert _rows(db) == [("tenant-1", True, False, None)]
    await client.resume_queue("tenant-1")
    assert _rows(db) == []
    assert [s.queue for s in await client.queue_stats()] == []


async def test_a_row_holding_an_override_outlives_the_resume_then_goes_with_the_clear(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.pause_queue("tenant-2")
    await client.set_runtime_overrides("tenant-2", rate_limit=3.0)
    await client.resume_queue("tenant-2")
    assert _rows(db) == [("tenant-2", False, False, 3.0)]
    cleared = await client.clear_runtime_overrides("tenant-2")
    assert cleared.rate_limit is None
    assert _rows(db) == []
    assert await client.queue_runtime_overrides("tenant-2") is None


async def test_a_paused_queue_keeps_its_row_when_its_overrides_are_cleared(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_runtime_overrides("tenant-3", rate_limit=3.0)
    await client.pause_queue("tenant-3")
    await client.clear_runtime_overrides("tenant-3")
    assert _rows(db) == [("tenant-3", True, False, None)]
    assert (await client.queue_runtime_overrides("tenant-3")) is not None


async def test_a_worker_turning_the_dlq_off_deletes_a_row_holding_nothing_else(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    noop_task(client, "a", "k")
    noop_task(client, "b", "k2")
    await client.start([awa.QueueConfig("a", dlq=True), awa.QueueConfig("b", dlq=True)])
    await client.shutdown()
    await client.pause_queue("b")
    assert _rows(db) == [("a", False, True, None), ("b", True, True, None)]
    await client.start([awa.QueueConfig("a", dlq=False), awa.QueueConfig("b", dlq=False)])
    await client.shutdown()
    assert _rows(db) == [("b", True, False, None)]  # paused: kept, its flag off


async def test_a_resume_racing_an_override_is_not_lost(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """A first version decided "delete or update" from one snapshot: a resume waiting on an
    override being written fell through both branches, and the queue stayed paused."""
    await client.pause_queue("t", paused_by="ops")
    async with await psycopg.AsyncConnection.connect(database_url) as writer:
        await writer.execute("UPDATE awa.queue_meta SET override_rate_limit = 5 WHERE queue = 't'")
        resume = asyncio.create_task(client.resume_queue("t"))

        await wait_for(lambda: statements_running(db, "-- queue_meta_resume", on_a_lock=True))
        await writer.commit()
        await asyncio.wait_for(resume, timeout=15)
    assert _rows(db) == [("t", False, False, 5.0)]


async def test_a_clear_racing_a_pause_is_not_lost(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    await client.set_runtime_overrides("t", rate_limit=5.0)
    async with await psycopg.AsyncConnection.connect(database_url) as writer:
        await writer.execute("UPDATE awa.queue_meta SET paused = true WHERE queue = 't'")
        clear = asyncio.create_task(client.clear_runtime_overrides("t"))

        await wait_for(
            lambda: statements_running(db, "-- queue_meta_clear_overrides", on_a_lock=True)
        )
        await writer.commit()
        cleared = await asyncio.wait_for(clear, timeout=15)
    assert cleared.rate_limit is None
    assert _rows(db) == [("t", True, False, None)]
