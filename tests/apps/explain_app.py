"""A worker process for the explain tests: ``python -m tests.apps.explain_app N``.

Serves queue ``imports`` with N permits. Kind ``hold`` records the pid of the process
running it in the job's metadata, then holds its permit until the worker stops. Publishes
its snapshot every 100 ms; prints "ready" once it runs; SIGTERM stops it gracefully.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import awa
from tests.helpers import FAST_WORKER

client = awa.AsyncClient()
stop = asyncio.Event()


@client.task(None, kind="hold", queue="imports")
async def hold(job: awa.Job[Any]) -> None:
    job.update_metadata({"pid": os.getpid()})
    await job.flush_progress()
    await stop.wait()


async def main(permits: int) -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start([("imports", permits)], **FAST_WORKER, runtime_snapshot_interval_ms=100)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
