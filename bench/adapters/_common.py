"""What every peer adapter shares: the protocol with the runner and the timing loops.

Stdlib only, since each adapter runs inside its own peer's virtualenv. An adapter is run as
``python <adapter>.py COMMAND [options]`` and answers on stdout with lines that start with
``@bench `` followed by one JSON object (anything else on stdout is the library talking
and is ignored). Commands:

    describe              -> {"system", "version", "completed_sql", "notes": [...]}
    setup                 -> install the system's schema into the (fresh) database
    enqueue --jobs N      -> bulk-enqueue N no-op jobs; {"seconds": elapsed}
    worker                -> prints {"event": "ready"}, waits for "go" on stdin, starts the
                             worker (32 concurrent handlers), prints {"event": "started"},
                             waits for "stop", prints {"event": "done", "starts": [[seq, t]]}
    produce --rate R --seconds S -> single inserts at a steady rate; {"commits": [[seq, t]]}
    insert --seconds S    -> single inserts in a loop; {"count": n, "seconds": elapsed}

Timestamps are ``time.monotonic()`` (CLOCK_MONOTONIC, system-wide on Linux), so the
producer's commit times and the worker's handler-start times compare directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

CONCURRENCY = 32
PREFIX = "@bench "

# Handler-start times, filled by each adapter's handler when the worker runs with --record.
STARTS: list[tuple[int, float]] = []
RECORD = False


def emit(payload: dict[str, Any]) -> None:
    """Send one protocol message to the runner."""
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


def record_start(seq: int) -> None:
    """Called first thing in every handler: remember when job ``seq`` started."""
    if RECORD:
        STARTS.append((seq, time.monotonic()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line every adapter accepts."""
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "command", choices=["describe", "setup", "enqueue", "worker", "produce", "insert"]
    )
    parser.add_argument("--url", default="")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--queues", type=int, default=1, help="spread jobs over N queues")
    parser.add_argument("--mode", choices=["hard", "weighted"], default="hard")
    parser.add_argument("--record", action="store_true", help="record handler start times")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop (awa only)")
    parser.add_argument("--unbounded", action="store_true", help="no concurrency limit (pgqueuer)")
    return parser.parse_args(argv)


def queue_names(count: int) -> list[str]:
    """``default`` for one queue, ``q0 … qN-1`` for several."""
    return ["default"] if count == 1 else [f"q{i}" for i in range(count)]


async def _stdin_line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def wait_for_command(expected: str) -> None:
    """Block until the runner writes ``expected`` (or closes stdin)."""
    while True:
        line = await _stdin_line()
        if not line or line.strip() == expected:
            return


async def serve_worker(
    args: argparse.Namespace,
    start: Callable[[], Awaitable[None]],
    stop: Callable[[], Awaitable[None]],
) -> None:
    """The worker lifecycle: ready → go → start → started → stop → done."""
    global RECORD
    RECORD = args.record
    emit({"event": "ready"})
    await wait_for_command("go")
    await start()
    emit({"event": "started"})
    await wait_for_command("stop")
    await stop()
    emit({"event": "done", "starts": STARTS})


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    """Seconds one awaited call takes."""
    began = time.perf_counter()
    await call()
    return time.perf_counter() - began


async def produce_steady(
    insert_one: Callable[[int], Awaitable[Any]], rate: float, seconds: float
) -> None:
    """Insert job ``seq`` at ``seq / rate`` seconds after the start; report commit times.

    A late insert is not skipped: the schedule catches up, so the count is always
    ``rate × seconds`` and a slow producer shows up as latency, not as missing jobs.
    """
    total = round(rate * seconds)
    commits: list[tuple[int, float]] = []
    began = time.monotonic()
    for seq in range(total):
        delay = began + seq / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await insert_one(seq)
        commits.append((seq, time.monotonic()))
    emit({"commits": commits, "seconds": time.monotonic() - began})


async def insert_loop(insert_one: Callable[[int], Awaitable[Any]], seconds: float) -> None:
    """Single inserts back to back for ``seconds`` (after one warm-up insert)."""
    await insert_one(-1)
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        await insert_one(count)
        count += 1
    emit({"count": count, "seconds": time.perf_counter() - began})
