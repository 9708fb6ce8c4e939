"""A worker whose ``completed`` hook appends the job id to a file:
``python -m tests.apps.hooks_app QUEUE=N ...``.

``AWA_TEST_HOOK_LOG`` names the file (each line written and fsynced before the hook
returns); ``AWA_TEST_RUN_LOG`` gets one line per handler run. No runtime snapshot is
published during the test (that upsert commits synchronously, which would make every
earlier commit durable). SIGTERM shuts down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

import awa
from tests.helpers import FAST_WORKER

logging.basicConfig(level=logging.INFO)  # what the durability check did, shown on a failure
client = awa.AsyncClient()
HOOK_LOG = os.environ.get("AWA_TEST_HOOK_LOG", os.devnull)
RUN_LOG = os.environ.get("AWA_TEST_RUN_LOG", os.devnull)


def _append(path: str, job_id: int) -> None:
    with open(path, "a") as log:
        log.write(f"{job_id}\n")
        log.flush()
        os.fsync(log.fileno())


@client.task(None, kind="noted", queue="dh")
async def noted(job: awa.Job[Any]) -> None:
    _append(RUN_LOG, job.id)


def record(event: awa.JobEvent) -> None:
    _append(HOOK_LOG, event.job.id)


client.on_event("completed", record)


async def main(queue_specs: list[str]) -> None:
    queues = [(name, int(n)) for name, n in (spec.split("=") for spec in queue_specs)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start(queues, runtime_snapshot_interval_ms=10_000, **FAST_WORKER)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
