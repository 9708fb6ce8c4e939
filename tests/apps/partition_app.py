"""A worker whose handler records when each run starts and ends, over a connection of its
own that may bypass the worker's (``AWA_TEST_RECORD_URL``): the test can cut the worker
off from the server and still see what its handler did.

``python -m tests.apps.partition_app QUEUE=N ...`` (database from AWA_DATABASE_URL,
``AWA_TEST_WORKER_SETTINGS`` (JSON) over the fast settings; SIGTERM: graceful shutdown;
prints "ready"). Kind ``long``: on the job's first lease it sleeps ``args["ms"]``, on a
later one it returns at once. Each run is a row of ``partition_runs``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import psycopg

import awa
from tests.helpers import FAST_WORKER

client = awa.AsyncClient()
record = psycopg.connect(
    os.environ.get("AWA_TEST_RECORD_URL") or os.environ["AWA_DATABASE_URL"], autocommit=True
)


@client.task(None, kind="long", queue="cut")
async def long(job: awa.Job[Any]) -> None:
    # Blocking writes on purpose: nothing can cancel the handler between them.
    record.execute(
        "INSERT INTO public.partition_runs (job_id, run_lease, pid, started_at) "
        "VALUES (%s, %s, %s, clock_timestamp())",
        (job.id, job.run_lease, os.getpid()),
    )
    ended_by = "return"
    try:
        if job.run_lease == 1:
            await asyncio.sleep(job.args["ms"] / 1000)
    except asyncio.CancelledError:
        ended_by = "cancel"
        raise
    finally:
        record.execute(
            "UPDATE public.partition_runs SET ended_at = clock_timestamp(), ended_by = %s "
            "WHERE job_id = %s AND pid = %s AND ended_at IS NULL",
            (ended_by, job.id, os.getpid()),
        )


async def main(queue_specs: list[str]) -> None:
    queues = [(name, int(n)) for name, n in (spec.split("=") for spec in queue_specs)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    settings = {**FAST_WORKER, **json.loads(os.environ.get("AWA_TEST_WORKER_SETTINGS") or "{}")}
    await client.start(queues, **settings)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=2_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
