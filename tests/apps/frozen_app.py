"""A worker that can be frozen between a claim and its handlers:
``python -m tests.apps.frozen_app QUEUE=N ...``.

With ``AWA_TEST_FREEZE_FILE`` set, the first poll that claims jobs blocks the event loop
(an observer's ``polled`` runs after the claim and before the launch) until that file
exists — the state a SIGSTOP can catch a worker in. Handlers record each start in
``frozen_exec`` (job id, lease, pid). Logs at INFO on stderr; prints "ready".
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

import psycopg

import awa
from awa.log import configure
from awa.worker.observe import Observer
from tests.helpers import FAST_WORKER

client = awa.AsyncClient()


@client.task(None, kind="victim", queue="fz")
async def victim(job: awa.Job[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(
        os.environ["AWA_DATABASE_URL"], autocommit=True
    ) as conn:
        await conn.execute(
            "INSERT INTO frozen_exec (job_id, run_lease, pid) VALUES (%s, %s, %s)",
            [job.id, job.run_lease, os.getpid()],
        )


class FreezeAfterClaim(Observer):
    """Blocks the loop after the first claim that returned jobs, until a file exists."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.done = False

    def polled(self, queue: str, claimed: int, rate_limited: bool) -> None:
        if claimed and not self.done:
            self.done = True
            print("frozen", flush=True)
            while not os.path.exists(self.path):
                time.sleep(0.05)


async def main(queue_specs: list[str]) -> None:
    configure(level=logging.INFO)
    freeze = os.environ.get("AWA_TEST_FREEZE_FILE")
    if freeze:
        client.add_observer(FreezeAfterClaim(freeze))
    queues = [(name, int(n)) for name, n in (spec.split("=") for spec in queue_specs)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start(queues, **FAST_WORKER)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=1_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
