"""A worker process for fleet tests: ``python -m tests.apps.fleet_app QUEUE=N ...``.

Handles the ``fleet_work`` kind (async sleep of ``args["ms"]``) and appends one JSON line
per execution to ``$AWA_FLEET_LOG`` (opened in append mode: lines from several processes
never interleave): the job, its queue, ``tenant`` and ordering key, the wall-clock start
and end of the handler, the attempt's ``attempted_at`` and this pid. Tests judge fleet
limits from these lines — what actually ran — never from awa's own counters.
``AWA_FLEET_SETTINGS`` may hold JSON worker settings (merged over FAST_WORKER). Prints
"ready" once the worker runs and shuts down gracefully on SIGTERM.
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
_log_fd = os.open(os.environ["AWA_FLEET_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


@client.task(None, kind="fleet_work", queue="fleet")
async def fleet_work(job: awa.Job[Any]) -> None:
    start = time.time()
    await asyncio.sleep(job.args.get("ms", 10) / 1000)
    end = time.time()
    assert job.attempted_at is not None
    record = {
        "id": job.id,
        "queue": job.queue,
        "tenant": job.args.get("tenant"),
        "ordering_key": job.ordering_key,
        "start": start,
        "end": end,
        "attempted_at": job.attempted_at.timestamp(),
        "pid": os.getpid(),
    }
    os.write(_log_fd, (json.dumps(record) + "\n").encode())


async def main(queue_specs: list[str]) -> None:
    queues = [(name, int(n)) for name, n in (spec.split("=") for spec in queue_specs)]
    settings = {**FAST_WORKER, **json.loads(os.environ.get("AWA_FLEET_SETTINGS", "{}"))}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await client.start(queues, **settings)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
