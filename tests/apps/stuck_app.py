"""Handlers that cannot be stopped, for ``awa worker tests.apps.stuck_app:client``.

Each records that it started (progress 1, written at once), then never returns:
``stuck_sync`` blocks its thread, ``stuck_async`` swallows every cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

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
