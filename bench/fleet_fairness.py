"""The fleet pool, measured (CONTRACT §9, ADR 0010): design record 011 across processes.

Two worker processes (bench/fleet_worker.py) against one PostgreSQL (embedded unless
DATABASE_URL is set). What runs is read from the database (jobs in state ``running`` per
queue, sampled), never from awa's counters:

1. **shares** — pool of 24: ``a`` weight 3, ``b`` weight 1, ``c`` min 4 weight 2, all
   saturated; mean running per queue vs the ideal (min + weighted part of the overflow);
2. **convergence** — ``b`` alone fills the pool with 200 ms jobs, then ``a`` (weight 3)
   gets a backlog: time from its insert until it runs its share (one job length is the
   bar: incumbents are never pre-empted, only not replaced);
3. **throughput** — the same work (a: 12 000, b: 4 000 jobs of 10 ms) drained by the two
   processes through the fleet pool of 24, and through per-process weighted pools of 12
   each (the record's mode): fleet ÷ per-process jobs/s (aim ≥ 0.95).

    python bench/fleet_fairness.py [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

import awa
from awa.embedded import EmbeddedPostgres

HERE = Path(__file__).resolve().parent
TOTAL = 24
# The throughput phase's work: about 10 s a drain. The 2.5 s drains used before gave
# ratios of 0.81–0.99 on the same code; these gave 0.929–0.933 (PG 15, three pairs).
DRAIN_JOBS = {"a": 12_000, "b": 4_000}
SHARES = {"a": (0, 3), "b": (0, 1), "c": (4, 2)}


def ideal(queues: dict[str, tuple[int, int]], total: int) -> dict[str, float]:
    """Each member's running jobs with all saturated: min + overflow × weight / Σ weight."""
    overflow = total - sum(m for m, _ in queues.values())
    weight = sum(w for _, w in queues.values())
    return {q: m + overflow * w / weight for q, (m, w) in queues.items()}


@contextmanager
def workers(url: str, spec: dict[str, Any], count: int = 2) -> Iterator[None]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "fleet_worker.py"), url, json.dumps(spec)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


async def until(done: Callable[[], bool], interval: float) -> None:
    """Sample the database every ``interval`` seconds until ``done()``."""
    while not done():  # noqa: ASYNC110 (polling the database is the measurement)
        await asyncio.sleep(interval)


def running(db: psycopg.Connection[Any]) -> dict[str, int]:
    rows = db.execute(
        "SELECT queue, count(*) FROM awa.jobs WHERE state = 'running' GROUP BY queue"
    ).fetchall()
    return {queue: int(n) for queue, n in rows}


def left(db: psycopg.Connection[Any]) -> int:
    row = db.execute(
        "SELECT count(*) FROM awa.jobs WHERE state IN ('available', 'running', 'retryable')"
    ).fetchone()
    return int(row[0]) if row else 0


async def fresh(admin_url: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo.conninfo_to_dict(admin_url)
    params["dbname"] = name
    url = conninfo.make_conninfo(**params)  # type: ignore[arg-type]
    async with awa.AsyncClient(url) as client:
        await client.migrate()
    return url


async def phase_shares(admin_url: str) -> dict[str, Any]:
    url = await fresh(admin_url, "fleet_shares")
    async with awa.AsyncClient(url) as client:
        await client.set_fleet_pool(
            TOTAL, {q: awa.PoolMember(m, w) for q, (m, w) in SHARES.items()}
        )
        for q in SHARES:
            await client.insert_many([{"ms": 20}] * 6_000, kind=f"work_{q}", queue=q)
        samples: dict[str, list[int]] = {q: [] for q in SHARES}
        totals: list[int] = []
        with workers(url, {"queues": SHARES, "per_queue": TOTAL}), psycopg.connect(url) as db:
            db.autocommit = True
            await asyncio.sleep(1.0)
            until = time.monotonic() + 4.0
            while time.monotonic() < until:
                now = running(db)
                for q in SHARES:
                    samples[q].append(now.get(q, 0))
                totals.append(sum(now.values()))
                await asyncio.sleep(0.05)
            for q in SHARES:
                await client.drain_queue(q)
    want = ideal(SHARES, TOTAL)
    return {
        "total": TOTAL,
        "max_running": max(totals),
        "mean_running": statistics.fmean(totals),
        "queues": {
            q: {
                "ideal": round(want[q], 2),
                "mean": round(statistics.fmean(samples[q]), 2),
                "error_percent": round((statistics.fmean(samples[q]) / want[q] - 1) * 100, 1),
            }
            for q in SHARES
        },
    }


async def phase_convergence(admin_url: str, rounds: int = 5) -> dict[str, Any]:
    url = await fresh(admin_url, "fleet_convergence")
    members = {"a": (0, 3), "b": (0, 1)}
    share = math.ceil(TOTAL * 3 / 4)
    times: list[float] = []
    async with awa.AsyncClient(url) as client:
        await client.set_fleet_pool(
            TOTAL, {q: awa.PoolMember(m, w) for q, (m, w) in members.items()}
        )
        await client.insert_many([{"ms": 200}] * 20_000, kind="work_b", queue="b")
        with workers(url, {"queues": members, "per_queue": TOTAL}), psycopg.connect(url) as db:
            db.autocommit = True
            for _ in range(rounds):
                await until(lambda: running(db).get("b", 0) >= TOTAL, 0.01)
                started = time.monotonic()
                await client.insert_many([{"ms": 200}] * 200, kind="work_a", queue="a")
                await until(lambda: running(db).get("a", 0) >= share, 0.005)
                times.append((time.monotonic() - started) * 1000)
                await client.drain_queue("a")
                await until(lambda: not running(db).get("a", 0), 0.01)
            await client.drain_queue("b")
    return {"share": share, "job_ms": 200, "ms_to_share": [round(t, 1) for t in times],
            "median_ms": round(statistics.median(times), 1)}  # fmt: skip


async def drain_rate(admin_url: str, fleet_pool: bool) -> float:
    url = await fresh(admin_url, "fleet_throughput")
    members = {"a": (0, 3), "b": (0, 1)}
    async with awa.AsyncClient(url) as client:
        if fleet_pool:
            await client.set_fleet_pool(
                TOTAL, {q: awa.PoolMember(m, w) for q, (m, w) in members.items()}
            )
            spec: dict[str, Any] = {"queues": members, "per_queue": TOTAL}
        else:  # the record's mode: each process its own weighted pool of TOTAL / 2
            spec = {"queues": members, "global_max_workers": TOTAL // 2}
        for queue, count in DRAIN_JOBS.items():
            await client.insert_many([{"ms": 10}] * count, kind=f"work_{queue}", queue=queue)
        with psycopg.connect(url) as db:
            db.autocommit = True
            with workers(url, spec):
                started = time.monotonic()
                await until(lambda: not left(db), 0.02)
                elapsed = time.monotonic() - started
    return sum(DRAIN_JOBS.values()) / elapsed


async def phase_throughput(admin_url: str, reps: int = 3) -> dict[str, Any]:
    fleet, local = [], []
    for _ in range(reps):  # interleaved, so drift hits both alike
        fleet.append(await drain_rate(admin_url, True))
        local.append(await drain_rate(admin_url, False))
    f, p = statistics.median(fleet), statistics.median(local)
    return {"fleet_pool_jobs_per_s": round(f), "per_process_jobs_per_s": round(p),
            "ratio": round(f / p, 3), "reps": reps}  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    server = None
    admin_url = os.environ.get("DATABASE_URL")
    tmp = tempfile.TemporaryDirectory(prefix="awa-fleet-bench-")
    if not admin_url:
        server = EmbeddedPostgres(os.path.join(tmp.name, "pgdata"))
        admin_url = server.start()
    try:
        results = {
            "shares": await phase_shares(admin_url),
            "convergence": await phase_convergence(admin_url),
            "throughput": await phase_throughput(admin_url),
        }
    finally:
        if server is not None:
            server.destroy()
        tmp.cleanup()
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
