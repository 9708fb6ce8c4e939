"""One worker process of ``awa demo``: ``python -m awa.cli.demo_worker URL``.

Registers the demo's three handlers and runs them in weighted mode (design record 011)
until SIGTERM, then shuts down gracefully. Prints "ready" once it runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import signal
import sys
import time
from datetime import UTC, datetime, timedelta

import awa

QUEUES = {  # name → (min_workers, weight): the shares the demo shows
    "demo_email": (2, 2),
    "demo_images": (1, 1),
    "demo_reports": (1, 1),
}
GLOBAL_MAX_WORKERS = 12  # per process


@dataclasses.dataclass
class SendEmail:
    to: str


@dataclasses.dataclass
class ResizeImage:
    path: str
    width: int


@dataclasses.dataclass
class BuildReport:
    report_id: int


def register_tasks(client: awa.AsyncClient) -> None:
    """The demo's handlers: async with retries, sync in threads, async with snoozes."""

    @client.task(SendEmail, queue="demo_email")
    async def send_email(job: awa.Job[SendEmail]) -> None:
        await asyncio.sleep(random.uniform(0.01, 0.03))
        if job.attempt == 1 and random.random() < 0.05:
            raise ConnectionError(f"SMTP server refused {job.args.to}")  # retried with backoff

    @client.task(ResizeImage, queue="demo_images")
    def resize_image(job: awa.Job[ResizeImage]) -> None:
        time.sleep(random.uniform(0.01, 0.03))  # a blocking call: runs in a thread

    @client.task(BuildReport, queue="demo_reports")
    async def build_report(job: awa.Job[BuildReport]) -> awa.Snooze | None:
        age = datetime.now(UTC) - job.created_at
        if job.args.report_id % 10 == 0 and age < timedelta(seconds=1):
            return awa.Snooze(0.3)  # data not ready yet: try again soon, attempt not spent
        await asyncio.sleep(random.uniform(0.01, 0.03))
        return None


async def main(url: str) -> None:
    client = awa.AsyncClient(url, max_connections=4)
    register_tasks(client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await client.start(
        [awa.QueueConfig(q, min_workers=m, weight=w) for q, (m, w) in QUEUES.items()],
        global_max_workers=GLOBAL_MAX_WORKERS,
        promote_interval_ms=100,
        runtime_snapshot_interval_ms=250,  # the demo's table shows what each worker applies
    )
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
