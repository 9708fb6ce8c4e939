"""Handlers that cannot be stopped, for ``awa worker tests.apps.stuck_app:client``.

Each records that it started (progress 1, written at once), then never returns:
``stuck_sync`` blocks its thread, ``stuck_async`` swallows every cancellation,
``stuck_in_thread`` waits on a blocked ``asyncio.to_thread`` call and ``own_thread``
leaves a non-daemon thread of its own running. ``beating_sync`` records in ``beats`` that
it runs, every 50 ms; ``stops_async`` ends when cancelled, ``stops_sync`` when asked to;
``blocks_loop`` blocks the event loop itself. ``sleeps_2s`` is the exception: it returns
after 2 s, a job a graceful stop lets finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

import psycopg

import awa

client = awa.AsyncClient()


@client.task(None, kind="stuck_sync", queue="stuck")
def stuck_sync(job: awa.Job[Any]) -> None:
    job.set_progress(1)
    job.flush_progress_sync()
    time.sleep(1e6)


@client.task(None, kind="stuck_async", queue="stuck")
async def stuck_async(job: awa.Job[Any]) -> None:
    job.set_progress(1)
    await job.flush_progress()
    while True:  # the kind of handler that cannot be stopped
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)


@client.task(None, kind="stuck_in_thread", queue="stuck")
async def stuck_in_thread(job: awa.Job[Any]) -> None:
    """A blocking call moved off the loop, as an SDK without async support is used: the
    cancellation ends the task, not the thread."""
    job.set_progress(1)
    await job.flush_progress()
    await asyncio.to_thread(time.sleep, 1e6)


@client.task(None, kind="own_thread", queue="stuck")
async def own_thread(job: awa.Job[Any]) -> None:
    """Starts a (non-daemon) thread of its own that outlives the job."""
    threading.Thread(target=time.sleep, args=(1e6,), name="handler-own").start()
    job.set_progress(1)
    await job.flush_progress()


def _beat(job: awa.Job[Any]) -> None:
    """Record, from the handler itself, that this attempt is running now (the database's
    clock, the same for every process)."""
    with psycopg.connect(os.environ["AWA_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO beats (job_id, attempt, pid, at) VALUES (%s, %s, %s, clock_timestamp())",
            (job.id, job.attempt, os.getpid()),
        )


@client.task(None, kind="beating_sync", queue="stuck")
def beating_sync(job: awa.Job[Any]) -> None:
    """On its first attempt, runs (and says so every 50 ms) until the process ends; on a
    later one, says so once and returns."""
    _beat(job)
    if job.attempt > 1:
        return
    job.set_progress(1)
    job.flush_progress_sync()
    while True:
        time.sleep(0.05)
        _beat(job)


@client.task(None, kind="stops_async", queue="stuck")
async def stops_async(job: awa.Job[Any]) -> None:
    """On its first attempt, waits until cancelled, and ends then."""
    if job.attempt == 1:
        job.set_progress(1)
        await job.flush_progress()
        await asyncio.sleep(3600)


@client.task(None, kind="blocks_loop", queue="stuck")
async def blocks_loop(job: awa.Job[Any]) -> None:
    """An ``async def`` that blocks the event loop (``time.sleep`` for ``asyncio.sleep``)."""
    job.set_progress(1)
    await job.flush_progress()
    time.sleep(1e6)  # noqa: ASYNC251 (the mistake this handler stands for)


@client.task(None, kind="stops_sync", queue="stuck")
def stops_sync(job: awa.Job[Any]) -> None:
    """On its first attempt, a plain def that returns once the worker asks it to stop
    (job.is_cancelled())."""
    if job.attempt > 1:
        return
    job.set_progress(1)
    job.flush_progress_sync()
    while not job.is_cancelled():  # seen up to 0.3 s late: after its task has ended
        time.sleep(0.3)


@client.task(None, kind="sleeps_2s", queue="stuck")
async def sleeps_2s(job: awa.Job[Any]) -> None:
    """Records that it started, then returns after 2 s."""
    job.set_progress(1)
    await job.flush_progress()
    await asyncio.sleep(2)
