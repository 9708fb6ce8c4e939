"""Every path that makes jobs available wakes the queue's dispatchers (awa_available), and
the worker's LISTEN connection says when it is back."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, wait_for


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("LISTEN awa_available")
        yield conn


async def _woken(conn: psycopg.AsyncConnection[Any]) -> set[str]:
    """Queues notified so far (waits briefly for notices already sent to arrive)."""
    queues: set[str] = set()
    async for notice in conn.notifies(timeout=0.5):
        queues.add(notice.payload)
    return queues


async def test_insert_wakes_only_when_available(
    client: awa.AsyncClient, listener: psycopg.AsyncConnection[Any]
) -> None:
    await client.insert({}, kind="k", queue="now")
    await client.insert({}, kind="k", queue="later", run_at=datetime.now(UTC) + timedelta(hours=1))
    assert await _woken(listener) == {"now"}


async def test_insert_many_wakes_each_queue_of_the_batch(
    client: awa.AsyncClient, listener: psycopg.AsyncConnection[Any]
) -> None:
    await client.insert_many([{"i": i} for i in range(10)], kind="k", queue="a")
    await client.insert_many([{"i": 1}], kind="k", queue="b")
    assert await _woken(listener) == {"a", "b"}


async def test_rolled_back_inserts_wake_nobody(
    client: awa.AsyncClient, listener: psycopg.AsyncConnection[Any]
) -> None:
    with pytest.raises(RuntimeError):
        async with client.transaction() as tx:
            await tx.insert({}, kind="k", queue="gone")
            await tx.insert_many([{}, {}], kind="k", queue="gone_too")
            raise RuntimeError("roll back")
    assert await _woken(listener) == set()


async def test_retry_and_resume_wake(
    client: awa.AsyncClient, listener: psycopg.AsyncConnection[Any]
) -> None:
    job = await client.insert({}, kind="k", queue="r")
    await client.cancel(job.id)
    await _woken(listener)  # drain the insert's notice
    await client.retry(job.id)
    await client.pause_queue("p")
    await client.resume_queue("p")
    assert await _woken(listener) == {"r", "p"}


async def test_a_listener_that_came_back_says_so(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Its loss was a WARNING and its return said nothing: an operator reading the log
    after an outage could not tell whether wake-ups were back (a review)."""
    client.task(None, kind="k", queue="q")(lambda job: None)
    await client.start([("q", 1)], **FAST_WORKER)
    listener = client._worker.listener
    try:
        await wait_for(lambda: _true(listener.backend_pid is not None))
        with caplog.at_level(logging.INFO, logger="awa"):
            db.execute("SELECT pg_terminate_backend(%s)", (listener.backend_pid,))
            await wait_for(lambda: _true(listener.connections == 2 and listener.connected))
        [back] = [r for r in caplog.records if getattr(r, "event", None) == "listener_reconnected"]
        assert back.levelno == logging.INFO
        assert back.getMessage() == "listener: reconnected after 1 failed attempt(s)"
    finally:
        await client.shutdown()


async def _true(value: bool) -> bool:
    return value
