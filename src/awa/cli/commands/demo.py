"""``awa demo`` — the main job on the embedded default, and the design records at work.

Two worker processes share three queues in weighted mode (design record 011); a live
table shows each queue's running jobs against its weighted share. Mid-run the demo
changes the fleet without a restart: a runtime override (design record 038) rate-limits
one queue in every process, then a fleet-wide concurrency cap (CONTRACT §8) holds
another — and the table shows each worker applying them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict

import awa
from awa.cli.args import bounded_int, with_example
from awa.cli.database import configured_url
from awa.cli.demo_worker import (
    GLOBAL_MAX_WORKERS,
    QUEUES,
    BuildReport,
    ResizeImage,
    SendEmail,
)
from awa.cli.output import Redraw, fail, format_table, print_json

PROCESSES = 2
RATE = 100.0  # jobs/s per process: the runtime override the demo sets on demo_email
CAP = 3  # the fleet-wide concurrency cap the demo sets on demo_reports
DEMO_LOCK_KEY = 0x61776100_64656D6F  # held by the running demo (a session advisory lock)

MAX_DEMO_JOBS = 1_000_000


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run the demo on the embedded PostgreSQL",
        **with_example(
            "Two worker processes drain three weighted queues; mid-run a live override and\n"
            "a fleet-wide cap change the fleet without a restart. A live table shows it.",
            "awa demo --jobs 3000",
        ),
    )
    # Bounded: the demo builds its jobs' args in memory (a billion was an OOM kill).
    p.add_argument("--jobs", type=bounded_int(1, MAX_DEMO_JOBS), default=1_000,
                   help=f"jobs per queue (at most {MAX_DEMO_JOBS:,})")  # fmt: skip
    p.set_defaults(handler=run)


def shares(waiting: dict[str, bool]) -> dict[str, float]:
    """Each queue's running jobs when every queue with waiting jobs is saturated: its
    minimum plus its weight's part of the overflow (design record 011), per process,
    times the processes."""
    overflow = GLOBAL_MAX_WORKERS - sum(m for m, _ in QUEUES.values())
    weight = sum(w for q, (_, w) in QUEUES.items() if waiting.get(q)) or 1
    return {
        q: PROCESSES * (m + overflow * w / weight) if waiting.get(q) else 0.0
        for q, (m, w) in QUEUES.items()
    }


def _applied(queue: str, instances: list[awa.RuntimeInstance]) -> str:
    """What the live workers apply to ``queue``, from their published snapshots."""
    rates, caps = [], []
    for instance in instances:
        runtime = instance.snapshot.queues.get(queue) if instance.snapshot else None
        if runtime is None:
            continue
        if runtime.effective.get("rate_limit") is not None:
            rates.append(runtime.effective["rate_limit"])
        limits = runtime.fleet.limits if runtime.fleet else None
        if limits is not None and limits.concurrency is not None:
            caps.append(limits.concurrency)
    parts = []
    if rates:
        parts.append(f"rate {rates[0]:g}/s in {len(rates)}/{len(instances)} workers")
    if caps:
        parts.append(f"fleet cap {caps[0]} in {len(caps)}/{len(instances)} workers")
    return "; ".join(parts) or "-"


class Progress:
    """The live table: counts from queue_stats(), applied values from the snapshots."""

    def __init__(self, total: int, baseline: dict[str, int]) -> None:
        self.total = total
        self.baseline = baseline
        self.started = time.monotonic()
        self.events: list[str] = []
        self.done: dict[str, int] = {}

    def note(self, event: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:5.1f}s  {event}")

    def fraction(self) -> float:
        return sum(min(v, self.total) for v in self.done.values()) / (len(QUEUES) * self.total)

    async def render(self, client: awa.AsyncClient) -> str:
        stats = {s.queue: s for s in await client.queue_stats() if s.queue in QUEUES}
        instances = [i for i in await client.list_runtime_instances(fresh_ms=5_000) if i.snapshot]
        waiting = {q: s.available + s.retryable + s.scheduled > 0 for q, s in stats.items()}
        ideal = shares(waiting)
        rows = []
        for queue in QUEUES:
            s = stats.get(queue)
            if s is None:
                continue
            done = s.completed + s.failed + s.cancelled - self.baseline.get(queue, 0)
            self.done[queue] = done
            bar = "█" * int(20 * min(done, self.total) / self.total)
            rows.append((
                queue, s.available + s.scheduled + s.retryable, s.running,
                f"{ideal[queue]:.0f}" if ideal[queue] else "-",
                f"{min(done, self.total)}/{self.total}", f"{bar:<20}",
                _applied(queue, instances),
            ))  # fmt: skip
        elapsed = time.monotonic() - self.started
        table = format_table(
            ("queue", "waiting", "running", "share", "completed", "progress", "applied"),
            rows,
            title=f"awa demo — {len(instances)} worker processes, {elapsed:5.1f}s",
        )
        return table + "".join(f"  {event}\n" for event in self.events[-4:])


@contextmanager
def _workers(url: str) -> Iterator[list[subprocess.Popen[str]]]:
    env = {**os.environ, "AWA_DATABASE_URL": url}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "awa.cli.demo_worker", url],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise awa.AwaError("a demo worker process did not start")
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            if proc.stdout is not None:
                proc.stdout.close()


async def _reset(client: awa.AsyncClient) -> dict[str, int]:
    """Remove what an interrupted earlier run left; the finished counts so far."""
    for queue in QUEUES:
        await client.drain_queue(queue)
        await client.clear_runtime_overrides(queue)
        await client.clear_queue_limits(queue)
    return {
        s.queue: s.completed + s.failed + s.cancelled
        for s in await client.queue_stats()
        if s.queue in QUEUES
    }


async def _enqueue(client: awa.AsyncClient, per_queue: int, out: TextIO) -> None:
    started = time.monotonic()
    emails = [SendEmail(f"user{i}@example.com") for i in range(per_queue)]
    await client.insert_many(emails, queue="demo_email")
    images = [ResizeImage(f"/img/{i}.png", 640) for i in range(per_queue)]
    await client.insert_many(images, queue="demo_images")
    await client.insert_many([BuildReport(i) for i in range(per_queue)], queue="demo_reports")
    enqueued = time.monotonic() - started
    print(f"enqueued {3 * per_queue} jobs in {enqueued * 1000:.0f} ms (COPY)", file=out, flush=True)


Step = tuple[float, str, Callable[[awa.AsyncClient], Any]]
STEPS: list[Step] = [
    (
        0.3,
        f"runtime override: demo_email rate_limit={RATE:g}/s (every process, no restart)",
        lambda c: c.set_runtime_overrides("demo_email", rate_limit=RATE),
    ),
    (
        0.5,
        f"fleet limit: demo_reports concurrency={CAP} across both processes",
        lambda c: c.set_queue_limits("demo_reports", concurrency=CAP),
    ),
]


async def run(args: argparse.Namespace, url: str | None) -> int:
    assert url is not None
    # One demo per database at a time: each resets the demo queues the other is using.
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as guard:
        cur = await guard.execute("SELECT pg_try_advisory_lock(%s)", (DEMO_LOCK_KEY,))
        row = await cur.fetchone()
        if not (row and row[0]):
            return fail("another awa demo is running on this database: wait for it to end", 1)
        if configured_url(args.database_url) is not None:  # not the embedded server
            where = conninfo_to_dict(url)
            sys.stderr.write(
                f"awa: demo on database {where.get('dbname', '')!s} at "
                f"{where.get('host', 'localhost')!s}:{where.get('port', 5432)!s} (the "
                "configured URL; unset it for the embedded server)\n"
            )
        return await _demo(args, url)


async def _demo(args: argparse.Namespace, url: str) -> int:
    per_queue = args.jobs
    out = sys.stderr if args.json else sys.stdout  # --json: stdout holds the summary only
    async with awa.AsyncClient(url, max_connections=4) as client:
        await client.migrate()
        baseline = await _reset(client)
        await _enqueue(client, per_queue, out)
        with _workers(url) as procs:
            progress = Progress(per_queue, baseline)
            progress.note(f"{PROCESSES} worker processes, weighted mode, shares 2:1:1")
            steps = list(STEPS)
            live = Redraw(out)
            while True:
                live.update(await progress.render(client))
                while steps and progress.fraction() >= steps[0][0]:
                    _, event, change = steps.pop(0)
                    await change(client)
                    progress.note(event)
                if all(progress.done.get(q, 0) >= per_queue for q in QUEUES):
                    break
                if any(proc.poll() is not None for proc in procs):
                    raise awa.AwaError("a demo worker process exited early")
                await asyncio.sleep(0.1)
            live.close()
            elapsed = time.monotonic() - progress.started
        await _reset(client)
    total = 3 * per_queue
    if args.json:
        print_json({"jobs": total, "seconds": round(elapsed, 3), "jobs_per_s": total / elapsed})
        return 0
    print(
        f"done: {total} jobs in {elapsed:.1f}s "
        f"({total / elapsed:,.0f} jobs/s end to end, including retries and snoozes)"
    )
    return 0
