"""A worker process for chaos tests: ``python -m tests.apps.worker_app QUEUE=N ...``.

Reads the database from AWA_DATABASE_URL, runs fast maintenance settings, handles the
``chaos_sleep`` kind (async sleep of args["ms"]) and ``chaos_sync`` (blocking sleep), and
shuts down gracefully on SIGTERM. Prints "ready" once the worker runs.
``AWA_TEST_WORKER_SETTINGS`` (JSON) overrides worker settings.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import awa
from tests.helpers import FAST_WORKER

client = awa.AsyncClient()


@client.task(None, kind="chaos_sleep", queue="chaos")
async def chaos_sleep(job: awa.Job[Any]) -> None:
    await asyncio.sleep(job.args.get("ms", 10) / 1000)


@client.task(None, kind="chaos_sync", queue="chaos")
def chaos_sync(job: awa.Job[Any]) -> None:
    time.sleep(job.args.get("ms", 10) / 1000)


async def main(queue_specs: list[str]) -> None:
    queues = [(name, int(n)) for name, n in (spec.split("=") for spec in queue_specs)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    settings = {**FAST_WORKER, **json.loads(os.environ.get("AWA_TEST_WORKER_SETTINGS") or "{}")}
    await client.start(queues or [("chaos", 8)], **settings)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
