"""Cancelling running jobs end to end, for async and sync handlers, from another process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import CHILD_PYTHONPATH, FAST_WORKER, wait_for

ROOT = Path(__file__).resolve().parents[2]


async def _cancel_from_another_process(database_url: str, job_id: int) -> str:
    """``awa job cancel ID`` in a separate Python process (its own connection)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "awa", "--database-url", database_url, "--json", "job", "cancel",
        str(job_id), cwd=ROOT, env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_cancel_from_another_process_stops_the_running_handler(
    client: awa.AsyncClient, database_url: str, sync: bool
) -> None:
    started = threading.Event()
    stopped = threading.Event()
    events: list[tuple[str, int]] = []
    states: list[awa.JobState] = []
    client.on_event("cancelled", lambda e: events.append((e.name, e.job.id)))
    client.on_event("cancelled", lambda e: states.append(e.job.state))

    if sync:

        @client.task(None, kind="long", queue="q")
        def long_sync(job: awa.Job[Any]) -> None:
            started.set()
            while not job.is_cancelled():
                stopped.wait(0.01)
            stopped.set()

    else:

        @client.task(None, kind="long", queue="q")
        async def long(job: awa.Job[Any]) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            finally:
                stopped.set()

    job = await client.insert({}, kind="long", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        assert await asyncio.to_thread(started.wait, 15)
        out = await _cancel_from_another_process(database_url, job.id)
        assert '"state": "cancelled"' in out
        assert await asyncio.to_thread(stopped.wait, 15)
        permits = client._worker.dispatchers["q"].permits

        async def permit_back() -> bool:
            return bool(permits.in_flight == 0)

        await wait_for(permit_back)

        async def hook_fired() -> bool:
            return ("cancelled", job.id) in events

        await wait_for(hook_fired)
        assert states == [awa.JobState.CANCELLED]  # the job as the attempt ended
        final = await client.get_job(job.id)
        assert final.state is awa.JobState.CANCELLED and final.finalized_at is not None
        assert final.errors[-1]["type"] == "Cancelled"
        assert client._worker.completer.applied == 0  # the late outcome wrote nothing
    finally:
        await client.shutdown()


async def test_cancel_that_misses_the_notice_is_caught_by_the_heartbeat(
    client: awa.AsyncClient,
) -> None:
    started = asyncio.Event()
    stopped = asyncio.Event()

    @client.task(None, kind="long", queue="q")
    async def long(job: awa.Job[Any]) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    job = await client.insert({}, kind="long", queue="q")
    await client.start([("q", 1)], **{**FAST_WORKER, "heartbeat_interval_ms": 100})
    try:
        await asyncio.wait_for(started.wait(), 15)
        await client._worker.listener.stop()  # the awa_control notice will not arrive
        await client.cancel(job.id)
        await asyncio.wait_for(stopped.wait(), 15)  # the next heartbeat finds the lease gone
    finally:
        await client.shutdown()
    assert (await client.get_job(job.id)).state is awa.JobState.CANCELLED


async def test_a_cancel_the_heartbeat_learns_of_first_still_stops_the_handler_as_cancelled(
    client: awa.AsyncClient, database_url: str
) -> None:
    """No notice at all (the row cancelled by hand): only the heartbeat finds out, and the
    handler is stopped as cancelled, its hook fired, as when the cancel's notice wins."""
    events: list[int] = []
    client.on_event("cancelled", lambda e: events.append(e.job.id))
    started = asyncio.Event()

    @client.task(None, kind="long", queue="q")
    async def long(job: awa.Job[Any]) -> None:
        started.set()
        await asyncio.Event().wait()

    job = await client.insert({}, kind="long", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        await asyncio.wait_for(started.wait(), 15)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
            await db.execute(
                "UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE id = %s",
                [job.id],
            )

        async def hook_fired() -> bool:
            return job.id in events

        await wait_for(hook_fired)
    finally:
        await client.shutdown()


async def test_a_job_claimed_again_while_its_old_handler_hangs_still_gets_that_handler_abandoned(
    client: awa.AsyncClient,
) -> None:
    """Cancelled, retried and claimed again by the same worker while its first handler
    (a plain ``def`` that ignores the cancel) still runs: both hung attempts are
    abandoned in time and give their permits back, so the queue's two permits can again
    run two jobs side by side."""
    release = threading.Event()
    starts: list[int] = []
    together = threading.Barrier(2)

    @client.task(None, kind="hang", queue="h")
    def hang(job: awa.Job[Any]) -> None:
        starts.append(job.attempt)
        release.wait(120)

    @client.task(None, kind="pair", queue="h")
    def pair(job: awa.Job[Any]) -> None:
        together.wait(30)  # both permits must be free for this to return

    stuck = await client.insert({}, kind="hang", queue="h")
    await client.start([awa.QueueConfig("h", max_workers=2, deadline_ms=0)], **FAST_WORKER)
    try:

        async def started(attempts: list[int]) -> bool:
            return starts == attempts

        await wait_for(lambda: started([1]))
        await client.cancel(stuck.id)
        await client.retry(stuck.id)
        await wait_for(lambda: started([1, 2]))  # the same job, its handler runs twice
        await client.cancel(stuck.id)

        async def abandoned() -> bool:
            census = client._worker.executor.census().get("h")
            return census is not None and census.abandoned == 2 and census.running == 0

        await wait_for(abandoned, timeout=30)
        jobs = await client.insert_many([{}, {}], kind="pair", queue="h")

        async def both_done() -> bool:
            states = [(await client.get_job(j.id)).state for j in jobs]
            return states == [awa.JobState.COMPLETED] * 2

        await wait_for(both_done, timeout=60)
    finally:
        release.set()
        await client.shutdown()


async def test_a_cancel_landing_as_the_handler_returns_fires_cancelled_once(
    client: awa.AsyncClient, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The operator's cancel commits, then the handler returns before any notice stops it:
    its outcome is refused as stale. That was reported as a lost lease with no hook; it is
    a cancel (one `cancelled` event, a log line saying so) and the job stays cancelled."""
    events: list[tuple[str, int, awa.JobState]] = []
    client.on_event("*", lambda e: events.append((e.name, e.job.id, e.job.state)))

    async with awa.AsyncClient(database_url) as operator:

        @client.task(None, kind="self_cancelling", queue="q")
        async def handler(job: awa.Job[Any]) -> None:
            await operator.cancel(job.id)  # committed before the handler returns

        jobs = [await client.insert({"n": n}, kind="self_cancelling", queue="q") for n in range(5)]
        await client.start([("q", 2)], **FAST_WORKER)
        await client._worker.listener.stop()  # no notice: the outcome always comes first
        try:
            with caplog.at_level("INFO", logger="awa"):

                async def all_reported() -> bool:
                    return sum(name == "cancelled" for name, _, _ in events) >= len(jobs)

                await wait_for(all_reported)
        finally:
            await client.shutdown()
    for job in jobs:
        assert [(n, s) for n, i, s in events if i == job.id and n != "started"] == [
            ("cancelled", awa.JobState.CANCELLED)
        ]
        assert (await client.get_job(job.id)).state is awa.JobState.CANCELLED
    assert caplog.text.count("cancelled by an operator as its handler returned") == len(jobs)
    assert "lost its lease" not in caplog.text


async def test_shutdown_does_not_say_it_returned_a_cancelled_job(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain def handler that ignores its cancel is abandoned at shutdown; its job was
    already cancelled, yet the warning said it "was returned to retryable" (a review):
    the fence matched nothing for it."""
    started, release = threading.Event(), threading.Event()

    @client.task(None, kind="deaf", queue="q")
    def deaf(job: awa.Job[Any]) -> None:
        started.set()
        release.wait(30)  # never looks at job.is_cancelled()

    job = await client.insert({}, kind="deaf", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        assert await asyncio.to_thread(started.wait, 15)
        await client.cancel(job.id)
        with caplog.at_level("WARNING", logger="awa"):
            await client.shutdown(timeout_ms=200)
    finally:
        release.set()
    assert (await client.get_job(job.id)).state is awa.JobState.CANCELLED
    assert (
        f"except those no longer running here (cancelled, rescued or finished meanwhile): {job.id}"
        in caplog.text
    )
