"""What every peer adapter shares: the protocol with the runner and the timing loops.

Stdlib only, since each adapter runs inside its own peer's virtualenv. An adapter is run as
``python <adapter>.py COMMAND [options]`` and answers on stdout with lines that start with
``@bench `` followed by one JSON object (anything else on stdout is the library talking
and is ignored). Commands:

    describe              -> {"system", "version", "completed_sql", "notes": [...]}
    setup                 -> install the system's schema into the (fresh) database
    enqueue --jobs N      -> bulk-enqueue N no-op jobs; {"seconds": elapsed, "cpu_seconds": …}
    worker                -> prints {"event": "ready"}, waits for "go" on stdin, starts the
                             worker (--concurrency handlers, 32 by default), prints
                             {"event": "started"}, waits for "stop", prints {"event": "done",
                             "starts": [[seq, t]], "ends": [[seq, t]]}
    produce --rate R --seconds S -> single inserts at a steady rate; {"commits": [[seq, t]]}
    insert --seconds S    -> single inserts in a loop; {"count": n, "seconds": elapsed,
                             "cpu_seconds": the adapter's own CPU time during the loop}

Handlers run ``job_body`` after ``record_start``: nothing for the no-op workloads,
``--work N`` rounds of pure-Python arithmetic (W5, CPU-bound) or ``--sleep-ms`` of
awaiting (W6); with ``--record`` the end of each job is recorded too.

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

# Handler start and end times, filled by each adapter's handler when run with --record.
STARTS: list[tuple[int, float]] = []
ENDS: list[tuple[int, float]] = []
RECORD = False
# What each handler does after recording its start (set from --work / --sleep-ms).
WORK_ROUNDS = 0
SLEEP_S = 0.0


def emit(payload: dict[str, Any]) -> None:
    """Send one protocol message to the runner."""
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


def record_start(seq: int) -> None:
    """Called first thing in every handler: remember when job ``seq`` started."""
    if RECORD:
        STARTS.append((seq, time.monotonic()))


def burn(rounds: int) -> int:
    """Pure-Python work: ``rounds`` iterations of integer arithmetic, holding the GIL."""
    total = 0
    for i in range(rounds):
        total = (total + i * i) % 1_000_003
    return total


def has_body() -> bool:
    """True when handlers do more than record their start (W5, W6, or --record ends)."""
    return bool(WORK_ROUNDS or SLEEP_S)


async def job_body(seq: int) -> None:
    """The handler's work after ``record_start``: CPU (W5) or a sleep (W6)."""
    if WORK_ROUNDS:
        burn(WORK_ROUNDS)
    if SLEEP_S:
        await asyncio.sleep(SLEEP_S)
    if RECORD:
        ENDS.append((seq, time.monotonic()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line every adapter accepts."""
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "command",
        choices=["describe", "setup", "enqueue", "worker", "idle", "produce", "insert"],
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
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="handlers")
    parser.add_argument("--work", type=int, default=0, help="CPU rounds per job (W5)")
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="handler sleep (W6)")
    parser.add_argument("--durable", action="store_true", help="synchronous commits (awa)")
    parser.add_argument("--cap", type=int, default=0, help="fleet concurrency cap (awa, W6)")
    args = parser.parse_args(argv)
    global WORK_ROUNDS, SLEEP_S
    WORK_ROUNDS, SLEEP_S = args.work, args.sleep_ms / 1000
    return args


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
    emit({"event": "done", "starts": STARTS, "ends": ENDS})


async def timed(call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    """Wall seconds and this process's CPU seconds one awaited call takes."""
    began, cpu = time.perf_counter(), time.process_time()
    await call()
    return {"seconds": time.perf_counter() - began, "cpu_seconds": time.process_time() - cpu}


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
    count, began, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - began < seconds:
        await insert_one(count)
        count += 1
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    emit({"count": count, "seconds": elapsed, "cpu_seconds": cpu})
