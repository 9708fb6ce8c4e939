"""``awa demo`` — the main job on the embedded default: enqueue, work, watch it drain.

Three queues with different handlers (async, sync in threads, one that sometimes fails
and retries, one that snoozes) run in weighted mode, while a live table shows each
queue's progress from ``queue_stats()``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import awa
from awa.cli.args import positive_int, with_example
from awa.cli.output import Redraw, format_table

QUEUES = ("demo_email", "demo_images", "demo_reports")


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


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run the demo on the embedded PostgreSQL",
        **with_example(
            "Enqueue jobs in three queues, run them in weighted mode and show live progress.",
            "awa demo --jobs 3000",
        ),
    )
    p.add_argument("--jobs", type=positive_int, default=2_000, help="jobs per queue")
    p.set_defaults(handler=run)


def _register_tasks(client: awa.AsyncClient) -> None:
    @client.task(SendEmail, queue="demo_email")
    async def send_email(job: awa.Job[SendEmail]) -> awa.RetryAfter | None:
        await asyncio.sleep(random.uniform(0.001, 0.004))
        if job.attempt == 1 and random.random() < 0.05:
            raise ConnectionError(f"SMTP server refused {job.args.to}")  # retried with backoff
        return None

    @client.task(ResizeImage, queue="demo_images")
    def resize_image(job: awa.Job[ResizeImage]) -> None:
        time.sleep(random.uniform(0.001, 0.003))  # a blocking call: runs in a thread

    @client.task(BuildReport, queue="demo_reports")
    async def build_report(job: awa.Job[BuildReport]) -> awa.Snooze | None:
        age = datetime.now(UTC) - job.created_at
        if job.args.report_id % 10 == 0 and age < timedelta(seconds=1):
            return awa.Snooze(0.3)  # data not ready yet: try again soon, attempt not spent
        await asyncio.sleep(0.005)
        return None


def _table(rows: dict[str, dict[str, int]], total: int, elapsed: float) -> str:
    lines = []
    for queue in QUEUES:
        r = rows.get(queue, {})
        done = min(r.get("completed", 0), total)
        bar = "█" * int(20 * done / total) if total else ""
        lines.append((
            queue, r.get("waiting", 0), r.get("running", 0),
            r.get("retrying", 0), f"{done}/{total}", f"{bar:<20}",
        ))  # fmt: skip
    columns = ("queue", "waiting", "running", "retrying", "completed", "progress")
    return format_table(columns, lines, title=f"awa demo — {elapsed:5.1f}s")


async def _progress(client: awa.AsyncClient, baseline: dict[str, int]) -> dict[str, dict[str, int]]:
    rows = {}
    for s in await client.queue_stats():
        if s.queue in QUEUES:
            rows[s.queue] = {
                "waiting": s.available + s.scheduled,
                "running": s.running,
                "retrying": s.retryable,
                "completed": s.completed + s.failed + s.cancelled - baseline.get(s.queue, 0),
            }
    return rows


async def run(args: argparse.Namespace, url: str | None) -> int:
    per_queue = args.jobs
    async with awa.AsyncClient(url, max_connections=8) as client:
        await client.migrate()
        _register_tasks(client)
        for queue in QUEUES:  # leftovers of an interrupted earlier run would skew the counts
            await client.drain_queue(queue)
        baseline = {
            s.queue: s.completed + s.failed + s.cancelled
            for s in await client.queue_stats()
            if s.queue in QUEUES
        }
        started = time.monotonic()
        await client.insert_many([SendEmail(f"user{i}@example.com") for i in range(per_queue)])
        await client.insert_many([ResizeImage(f"/img/{i}.png", 640) for i in range(per_queue)])
        await client.insert_many([BuildReport(i) for i in range(per_queue)])
        enqueued = time.monotonic() - started
        print(f"enqueued {3 * per_queue} jobs in {enqueued * 1000:.0f} ms (COPY)", flush=True)
        await client.start(
            [
                awa.QueueConfig("demo_email", min_workers=4, weight=2),
                awa.QueueConfig("demo_images", min_workers=2, weight=1),
                awa.QueueConfig("demo_reports", min_workers=2, weight=1),
            ],
            global_max_workers=24,
            promote_interval_ms=100,
        )
        live = Redraw()
        while True:
            rows = await _progress(client, baseline)
            live.update(_table(rows, per_queue, time.monotonic() - started))
            if all(rows.get(q, {}).get("completed", 0) >= per_queue for q in QUEUES):
                break
            await asyncio.sleep(0.1)
        live.close()
        elapsed = time.monotonic() - started
        await client.shutdown()
    print(
        f"done: {3 * per_queue} jobs in {elapsed:.1f}s "
        f"({3 * per_queue / elapsed:,.0f} jobs/s end to end, including retries and snoozes)"
    )
    return 0
