"""A queue's control row lives only while it holds something (a pause, an override, the
DLQ flag): a review's per-tenant churn left a row for every queue ever paused, listed by
queue_stats(), `awa queue list`, the dashboard and /metrics for ever (18 a minute)."""

from __future__ import annotations

from typing import Any

import psycopg

import awa
from awa.db import sql


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


def test_turning_the_dlq_off_deletes_a_row_holding_nothing_else(
    db: psycopg.Connection[Any],
) -> None:
    def set_dlq(**queues: bool) -> None:
        db.execute(sql.QUEUE_META_SET_DLQ, {"queues": list(queues), "dlq": list(queues.values())})

    set_dlq(a=True, b=True)
    db.execute("UPDATE awa.queue_meta SET paused = true WHERE queue = 'b'")
    assert _rows(db) == [("a", False, True, None), ("b", True, True, None)]
    set_dlq(a=False, b=False)
    assert _rows(db) == [("b", True, False, None)]
    set_dlq(a=False)  # no row, turned off: still none
    assert _rows(db) == [("b", True, False, None)]
