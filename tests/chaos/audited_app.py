"""A worker process whose handlers log each finished execution in ``chaos_exec``.

``python -m tests.chaos.audited_app QUEUE=N ...`` (database from AWA_DATABASE_URL, fast
maintenance settings — ``AWA_TEST_WORKER_SETTINGS`` (JSON) overrides them —, graceful
shutdown on SIGTERM, prints "ready" once running).

Kind ``audited``: args ``ms`` (an ``await asyncio.sleep``), and ``block_ms``: on the
job's first claim only (``run_lease`` 1: a rescue before the first heartbeat gives the
attempt number back, not the lease), the handler calls ``time.sleep`` — it blocks the whole event
loop, heartbeats included — and then returns at once, so its outcome reaches the
completer before any heartbeat can tell it that its lease is gone. Each execution is
recorded with its attempt's ``(run_lease, attempted_at)`` just before the handler
returns, synchronously (no await: nothing can cancel the handler in between).
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
from tests.chaos.support import Recorder
from tests.helpers import FAST_WORKER

client = awa.AsyncClient()
recorder = Recorder(client.database_url)


@client.task(None, kind="audited", queue="chaos")
async def audited(job: awa.Job[Any]) -> None:
    if job.run_lease == 1 and job.args.get("block_ms"):
        time.sleep(job.args["block_ms"] / 1000)  # noqa: ASYNC251 (the point: block the loop)
    else:
        await asyncio.sleep(job.args.get("ms", 0) / 1000)
    recorder.record(job, os.getpid())


async def main(queue_specs: list[str]) -> None:
    queues = [(name, int(n)) for name, n in (spec.split("=") for spec in queue_specs)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    settings = {**FAST_WORKER, **json.loads(os.environ.get("AWA_TEST_WORKER_SETTINGS") or "{}")}
    await client.start(queues or [("chaos", 8)], **settings)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()
    recorder.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
