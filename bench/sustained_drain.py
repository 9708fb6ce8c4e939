"""A long drain, with and without the leader's vacuum of awa.jobs (ADR 0041).

W1 drains 20 000 jobs, too few for the claim's index walk to grow: each claim steps over
the dead entries of every job claimed since the table was last vacuumed, and autovacuum
comes at most once a minute. This drains ``--jobs`` (200 000) no-op jobs with one
worker process of ``--handlers`` (32), once with ``vacuum_dead_rows=0`` (autovacuum
only) and once with the default, interleaved for ``--reps`` rounds, each in a fresh
database, and reports jobs/s, server and worker CPU per job (bench/harness/meter.py),
and the vacuums each kind ran.

    python bench/sustained_drain.py [--jobs 200000] [--reps 2] [--pg-bin DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

import awa
from awa.config import WorkerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.meter import Meter, per_unit
from harness.server import start_server

WORKER = """
import asyncio, json, os, sys
import awa
client = awa.AsyncClient(os.environ["BENCH_URL"])

@client.task(None, kind="noop", queue="default")
async def noop(job):
    return None

async def main():
    settings = json.loads(os.environ["BENCH_SETTINGS"])
    await client.start([("default", int(os.environ["BENCH_HANDLERS"]))], **settings)
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""
DEFAULT = WorkerConfig(queues=()).vacuum_dead_rows
ARMS = {"autovacuum only": 0, f"vacuum_dead_rows={DEFAULT}": DEFAULT}


async def insert(url: str, jobs: int) -> None:
    async with awa.AsyncClient(url) as client:
        await client.migrate()
        for start in range(0, jobs, 50_000):
            count = min(50_000, jobs - start)
            await client.insert_many([{"n": i} for i in range(count)], kind="noop")


def _one(conn: psycopg.Connection[tuple[int, ...]], query: str) -> int:
    row = conn.execute(query).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def drain(url: str, database: str, jobs: int, handlers: int, dead_rows: int) -> dict[str, float]:
    asyncio.run(insert(url, jobs))
    env = {
        **os.environ,
        "BENCH_URL": url,
        "BENCH_HANDLERS": str(handlers),
        "BENCH_SETTINGS": json.dumps({"vacuum_dead_rows": dead_rows}),
    }
    meter = Meter(url, database)
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            before, started = meter.read([proc.pid]), time.perf_counter()
            assert proc.stdout.readline().strip() == "ready"
            done = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
            while _one(conn, done) < jobs:
                time.sleep(0.1)
            seconds = time.perf_counter() - started
            after = meter.read([proc.pid])
            stats = "FROM pg_stat_user_tables WHERE relid = 'awa.jobs'::regclass"
            vacuums = _one(conn, f"SELECT vacuum_count {stats}")
            autovacuums = _one(conn, f"SELECT autovacuum_count {stats}")
    finally:
        proc.kill()
        proc.wait()
    costs = per_unit(before, after, jobs)
    return {"jobs_per_s": jobs / seconds, "vacuums": vacuums, "autovacuums": autovacuums,
            **costs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--handlers", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--pg-bin", help="initdb a server from this PostgreSQL bin directory")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="awa-sustained-") as root:
        server, source = start_server(args.pg_bin, Path(root))
        try:
            for rep in range(args.reps):
                arms = list(ARMS.items()) if rep % 2 == 0 else list(reversed(ARMS.items()))
                for arm, dead_rows in arms:
                    url = server.fresh_database("sustained")
                    run = drain(url, "sustained", args.jobs, args.handlers, dead_rows)
                    results[arm].append(run)
                    print(f"{arm}: {run['jobs_per_s']:.0f} jobs/s", flush=True)
        finally:
            server.close()
    print(f"\n{args.jobs} no-op jobs, 1 process x {args.handlers} handlers, {source}")
    print("| arm | jobs/s (median; runs) | server CPU µs/job | worker CPU µs/job | vacuums |")
    print("|---|--:|--:|--:|--:|")
    for arm, runs in results.items():
        rates = " / ".join(f"{r['jobs_per_s']:.0f}" for r in runs)
        median = statistics.median(r["jobs_per_s"] for r in runs)
        server_cpu = statistics.median(r.get("server_cpu_us_per_job", float("nan")) for r in runs)
        worker_cpu = statistics.median(r["client_cpu_us_per_job"] for r in runs)
        vac = " / ".join(f"{r['vacuums']:.0f}+{r['autovacuums']:.0f}auto" for r in runs)
        print(f"| {arm} | {median:.0f} ({rates}) | {server_cpu:.0f} | {worker_cpu:.0f} | {vac} |")


if __name__ == "__main__":
    main()
