"""Connection budget: how many server connections a fleet of worker processes holds, and
what bounding them costs in throughput — direct, and through PgBouncer (transaction mode).

    python bench/connection_budget.py [--jobs 20000] [--handlers 32] [--reps 2] [--cpu]

Each configuration starts ``awa worker --processes P --max-connections M`` (the
supervisor) on an embedded server, inserts ``--jobs`` no-op jobs in one COPY, and
measures the drain (commit of the insert → last completion) and the peak number of
server backends of the database, sampled every 20 ms from a connection of its own (not
counted). Prints a Markdown table (medians of ``--reps``) for docs/scaling.md.

``--cpu`` measures processes instead: 2 000 jobs of 2 ms of pure-Python work each, 1 and
2 processes, 8 handlers per process — what ``--processes`` buys on a multi-core host.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pgbouncer.bouncer import PgBouncer, find_pgbouncer  # noqa: E402

import awa  # noqa: E402
from awa.embedded import EmbeddedPostgres  # noqa: E402

APP = """
import time
import awa
client = awa.AsyncClient()

@client.task(None, kind="noop", queue="budget")
async def noop(job):
    return None

@client.task(None, kind="spin", queue="budget")
async def spin(job):  # pure-Python work that holds the event loop, as CPU-bound code does
    end = time.perf_counter() + job.args["ms"] / 1000
    while time.perf_counter() < end:
        pass
"""

# The fleet's connections: client backends (not autovacuum, which shows the database
# too), not this one, not the producer's (which may still be exiting).
PRODUCER = "awa-budget-producer"
COUNT_BACKENDS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
    f"AND application_name IS DISTINCT FROM '{PRODUCER}'"
)


@dataclass(frozen=True)
class Setup:
    """One configuration of the fleet."""

    processes: int
    max_connections: int
    via: str  # "direct", "pgbouncer + listen_url", "pgbouncer, polling"

    @property
    def label(self) -> str:
        return f"{self.processes} × max_connections={self.max_connections}, {self.via}"


@dataclass
class Sample:
    jobs_per_s: float
    peak_backends: int


def _fleet(
    setup: Setup, url: str, direct: str, handlers: int, app_dir: str
) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "awa", "worker", "budget_app:client",
        "--queue", f"budget={handlers}", "--processes", str(setup.processes),
        "--max-connections", str(setup.max_connections),
    ]  # fmt: skip
    if setup.via == "pgbouncer + listen_url":
        command += ["--listen-url", direct]
    env = {**os.environ, "AWA_DATABASE_URL": url, "PYTHONPATH": f"{app_dir}:{ROOT}"}
    env.pop("AWA_LISTEN_URL", None)
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, cwd=app_dir)


def _wait_running(proc: subprocess.Popen[str], processes: int) -> None:
    assert proc.stderr is not None
    running: set[str] = set()
    for line in proc.stderr:
        found = re.search(r"process (\d+) running", line)
        if found:
            running.add(found.group(1))
            if len(running) == processes:
                break
        if "error" in line:
            raise RuntimeError(line.strip())
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained


def _run(
    setup: Setup,
    url: str,
    direct: str,
    jobs: int,
    handlers: int,
    app_dir: str,
    cpu_ms: float = 0,
) -> Sample:
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute("TRUNCATE awa.jobs")
        # The previous fleet's backends may still be exiting: they must not count here.
        deadline = time.monotonic() + 60
        while (row := conn.execute(COUNT_BACKENDS).fetchone()) and row[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{row[0]} backend(s) of an earlier fleet never went away")
            time.sleep(0.05)
    proc = _fleet(setup, url, direct, handlers, app_dir)
    try:
        _wait_running(proc, setup.processes)
        with psycopg.connect(direct, autocommit=True) as watch:
            peak = 0
            producer_url = conninfo.make_conninfo(direct, application_name=PRODUCER)
            with awa.Client(producer_url) as producer:
                if cpu_ms:
                    producer.insert_many([{"ms": cpu_ms}] * jobs, kind="spin", queue="budget")
                else:
                    producer.insert_many([{}] * jobs, kind="noop", queue="budget")
            started = time.perf_counter()
            while True:
                backends = watch.execute(COUNT_BACKENDS).fetchone()
                done = watch.execute(
                    "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER "
                    "(WHERE state IN ('failed', 'cancelled')) FROM awa.jobs"
                ).fetchone()
                assert backends is not None and done is not None
                peak = max(peak, int(backends[0]))
                if done[1]:
                    raise RuntimeError(f"{done[1]} job(s) failed: see awa.jobs.errors")
                if done[0] >= jobs:
                    break
                time.sleep(0.02)  # the sampling period
            elapsed = time.perf_counter() - started
        return Sample(jobs / elapsed, peak)
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--handlers", type=int, default=32, help="per process")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="the CPU-bound table instead")
    parser.add_argument("--pgbouncer-only", action="store_true", help="only the PgBouncer rows")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the server and PgBouncer below are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = tempfile.mkdtemp(prefix="awa-budget-")
    app_dir = os.path.join(root, "app")
    os.makedirs(app_dir)
    Path(app_dir, "budget_app.py").write_text(APP)
    server = EmbeddedPostgres(
        os.path.join(root, "pgdata"),
        settings={"max_connections": "400", "fsync": "off", "synchronous_commit": "off"},
    )
    admin = server.start()
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE DATABASE budget")
    direct = server.url("budget")
    with awa.Client(direct) as client:
        client.migrate()
    if args.cpu:
        try:
            _cpu_table(direct, app_dir, args.reps)
        finally:
            server.destroy()
        return
    setups = [] if args.pgbouncer_only else [Setup(1, m, "direct") for m in (10, 4, 2, 1)]
    setups += [] if args.pgbouncer_only else [Setup(4, m, "direct") for m in (10, 2)]
    if find_pgbouncer() is not None:
        setups += [Setup(4, 10, "pgbouncer + listen_url"), Setup(4, 10, "pgbouncer, polling")]
    else:
        print("(no PgBouncer rows: pgbouncer is not installed)", file=sys.stderr)
    print(f"{args.jobs} no-op jobs, {args.handlers} handlers per process, medians of {args.reps}")
    print("\n| fleet | jobs/s | peak server connections |\n|---|--:|--:|")
    try:
        for setup in setups:
            samples = [
                _sample(setup, admin, direct, args.jobs, args.handlers, app_dir)
                for _ in range(args.reps)
            ]
            rate = statistics.median(s.jobs_per_s for s in samples)
            peak = max(s.peak_backends for s in samples)
            print(f"| {setup.label} | {rate:,.0f} | {peak} |", flush=True)
    finally:
        server.destroy()


def _sample(
    setup: Setup, admin: str, direct: str, jobs: int, handlers: int, app_dir: str
) -> Sample:
    """One run; a PgBouncer of its own for the PgBouncer setups (it keeps its server
    connections after a fleet is gone, which would count in the next run)."""
    if setup.via == "direct":
        return _run(setup, direct, direct, jobs, handlers, app_dir)
    bouncer = PgBouncer(admin, pool_size=20).start()
    try:
        return _run(setup, bouncer.url_for(direct), direct, jobs, handlers, app_dir)
    finally:
        bouncer.stop()


def _cpu_table(direct: str, app_dir: str, reps: int) -> None:
    print(f"2000 jobs of 2 ms pure-Python work, 8 handlers per process, medians of {reps}")
    print("\n| processes | jobs/s | × one process |\n|---|--:|--:|")
    base = 0.0
    for processes in (1, 2):
        setup = Setup(processes, 10, "direct")
        rate = statistics.median(
            _run(setup, direct, direct, 2_000, 8, app_dir, cpu_ms=2).jobs_per_s for _ in range(reps)
        )
        base = base or rate
        print(f"| {processes} | {rate:,.0f} | {rate / base:.2f} |", flush=True)


if __name__ == "__main__":
    main()
