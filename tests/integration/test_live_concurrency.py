"""Live concurrency (design record 038 Tier 2, CONTRACT §10): max_workers, min_workers and
weight changed on a running worker, judged from the jobs the database shows running and
from what the handlers recorded."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, noop_task, running_jobs, wait_for

SLOW_MS = 250


def _slow_task(client: awa.AsyncClient, runs: list[tuple[float, float]]) -> None:
    @client.task(None, kind="slow", queue="q")
    async def slow(job: awa.Job[Any]) -> None:
        start = time.monotonic()
        await asyncio.sleep(job.args["ms"] / 1000)
        runs.append((start, time.monotonic()))


async def test_max_workers_shrinks_without_interrupting_and_grows(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    runs: list[tuple[float, float]] = []
    _slow_task(client, runs)
    await client.insert_many([{"ms": SLOW_MS}] * 400, kind="slow", queue="q")
    await client.start([("q", 10)], **{**FAST_WORKER, "override_refresh_ms": 600_000})
    try:

        async def running(n: int) -> bool:
            return running_jobs(db, "q") == n

        await wait_for(lambda: running(10))
        await client.set_runtime_overrides("q", max_workers=3)
        await wait_for(lambda: running(3))
        snap = client.runtime_snapshot().queues["q"]
        assert snap.effective["max_workers"] == 3 and snap.configured["max_workers"] == 10
        assert snap.capacity == awa.HardReserved(3)
        await client.set_runtime_overrides("q", max_workers=8)
        await wait_for(lambda: running(8))
        await client.clear_runtime_overrides("q")
        await wait_for(lambda: running(10))
        await client.drain_queue("q")
        await wait_for(lambda: running(0))
    finally:
        await client.shutdown()
    # No job was cut short by a shrink: every job that started ran its full length and
    # completed; the drain cancelled only jobs that never started.
    started = db.execute("SELECT state, count(*) FROM awa.jobs WHERE attempt > 0 GROUP BY 1")
    assert dict(started.fetchall()) == {"completed": len(runs)}
    assert all(end - start >= SLOW_MS / 1000 * 0.99 for start, end in runs)


async def test_max_workers_raised_past_the_handler_threads_runs_every_permit(
    client: awa.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The threads sized at start are at least SYNC_THREADS_CEILING; made small here so a
    # live raise past them needs no hundreds of threads.
    monkeypatch.setattr("awa.worker.runtime.SYNC_THREADS_CEILING", 2)
    release = threading.Event()
    started: list[int] = []

    @client.task(None, kind="blocking", queue="q")
    def blocking(job: awa.Job[Any]) -> None:
        started.append(job.id)
        release.wait(30)

    await client.insert_many([{}] * 6, kind="blocking", queue="q")
    await client.start([("q", 2)], **FAST_WORKER)
    try:
        await wait_for(lambda: _count_is(started, 2))
        await client.set_runtime_overrides("q", max_workers=5)
        await wait_for(lambda: _count_is(started, 5))  # each of the 5 permits has a thread
    finally:
        release.set()
        await client.shutdown()


async def _count_is(items: list[Any], n: int) -> bool:
    return len(items) == n


async def test_an_override_announced_while_nobody_listened_lands_when_listening_resumes(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    # The cadence is too long to help: only the reconnect's refresh can apply it (before,
    # a notice sent between the worker's first refresh and its first LISTEN was lost).
    runs: list[tuple[float, float]] = []
    _slow_task(client, runs)
    await client.insert_many([{"ms": SLOW_MS}] * 100, kind="slow", queue="q")
    await client.start([("q", 6)], **{**FAST_WORKER, "override_refresh_ms": 600_000})
    try:
        await wait_for(lambda: _running_is(db, "q", 6))
        await client._worker.listener.stop()
        await client.set_runtime_overrides("q", max_workers=2)  # its notice is lost
        client._worker.listener.start()
        await wait_for(lambda: _running_is(db, "q", 2))
        assert client.runtime_snapshot().queues["q"].effective["max_workers"] == 2
    finally:
        await client.shutdown()


async def _running_is(db: psycopg.Connection[Any], queue: str, n: int) -> bool:
    return running_jobs(db, queue) == n


async def test_a_weight_override_moves_the_shares_of_a_weighted_worker(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    for queue in ("a", "b"):

        @client.task(None, kind=f"slow_{queue}", queue=queue)
        async def slow(job: awa.Job[Any]) -> None:
            await asyncio.sleep(0.1)

        await client.insert_many([{}] * 600, kind=f"slow_{queue}", queue=queue)
    await client.start(
        [awa.QueueConfig("a"), awa.QueueConfig("b")],
        global_max_workers=12,
        **{**FAST_WORKER, "override_refresh_ms": 600_000},
    )
    try:

        async def split(a: int, b: int) -> bool:
            return (running_jobs(db, "a"), running_jobs(db, "b")) == (a, b)

        await wait_for(lambda: split(6, 6))
        await client.set_runtime_overrides("a", weight=3)
        await wait_for(lambda: split(9, 3))
        assert client.runtime_snapshot().queues["a"].capacity.weight == 3  # type: ignore[union-attr]
        await client.set_runtime_overrides("b", min_workers=6)  # b: 6 of its own + share
        await wait_for(lambda: split(5, 7))  # overflow 6: a ceil(6·3/4)=5, b 6 + 1
        await client.drain_queue("a")
        await client.drain_queue("b")
    finally:
        await client.shutdown()


async def test_a_minimum_over_the_global_pool_is_ignored_logged_and_reported(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    noop_task(client, queue="a")
    await client.start(
        [awa.QueueConfig("a", min_workers=2), awa.QueueConfig("b", min_workers=2)],
        global_max_workers=6,
        **FAST_WORKER,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="awa"):
            await client.set_runtime_overrides("a", min_workers=5, max_workers=9)

            async def refused() -> bool:
                return "min_workers" in client.runtime_snapshot().queues["a"].ignored

            await wait_for(refused)
        queue = client.runtime_snapshot().queues["a"]
        assert queue.effective["min_workers"] == 2 and queue.overrides["min_workers"] == 5
        assert "global_max_workers (6)" in queue.ignored["min_workers"]
        assert "no meaning in weighted mode" in queue.ignored["max_workers"]
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert sum("global_max_workers (6)" in m for m in messages) == 1
    finally:
        await client.shutdown()
