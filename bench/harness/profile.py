"""Where awa's time goes on each hot path: py-spy of the client process, the server's own
per-statement counters (pg_stat_statements, preloaded for this mode only), what a job
costs (CPU, WAL, transactions), and ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` of the hot
statements. Written to bench/results/profile.md and embedded in docs/benchmarks.md.

Paths: the W1 worker (default and durable), W3 single inserts, the bulk ``insert_many``.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from harness.adapter import Adapter, AdapterProcess
from harness.meter import Meter, per_unit
from harness.peers import PEERS, TOOLS, python_for
from harness.server import Server
from harness.statements import explain_hot_statements
from harness.workloads import Settings, wait_completed

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")
DATABASE = "bench_profile"


def _short(frame: str) -> str:
    """``func (path/to/awa/worker/x.py:12)`` → ``awa/worker/x.py:func``."""
    match = FRAME.match(frame)
    if not frame.strip():
        return "(frame without a name: native code)"
    if not match:
        return frame
    path = match["file"]
    for marker in ("/site-packages/", "/src/", "/lib/python3.11/", "/lib/python3.12/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match['func']}"


def summarise(raw: Path, within: str | None = None, top: int = 12) -> str:
    """Self time per function and inclusive time per awa function, from collapsed stacks
    (only the stacks passing through a frame containing ``within``, when given)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or (within and within not in stack):
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            if frame.startswith("awa/") or frame.startswith("psycopg"):
                inclusive[frame] += n
    if not total:
        return "py-spy recorded no samples."

    def rows(counter: Counter[str]) -> list[str]:
        return [f"| `{name}` | {100 * n / total:.1f} % |" for name, n in counter.most_common(top)]

    return "\n".join(
        [
            f"py-spy: {total} samples (idle time excluded). Self time:",
            "",
            "| function (self) | share |",
            "|---|--:|",
            *rows(own),
            "",
            "Inclusive (awa and psycopg functions, with everything they call):",
            "",
            "| function (inclusive) | share |",
            "|---|--:|",
            *rows(inclusive),
        ]
    )


class Spy:
    """py-spy attached to one process until it exits."""

    def __init__(self, pid: int, raw: Path) -> None:
        spy = Path(python_for(TOOLS, raw.parent / "venvs.log")).parent / "py-spy"
        self.raw = raw
        self.proc = subprocess.Popen(
            [
                str(spy),
                "record",
                "--pid",
                str(pid),
                "--rate",
                "500",
                "--format",
                "raw",
                "--output",
                str(raw),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches

    def wait(self) -> None:
        self.proc.wait(timeout=60)


def _statements(url: str, units: int, top: int = 6) -> str:
    """The statements the server ran most time on, per job."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 60), calls, rows,"
            " total_exec_time, wal_bytes, shared_blks_hit + shared_blks_read"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT %s",
            (top,),
        ).fetchall()
    lines = [
        "| statement (start) | calls | rows/call | exec µs/job | WAL bytes/job | buffers/job |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for query, calls, nrows, total_ms, wal, blocks in rows:
        lines.append(
            f"| `{query.replace('|', '/')}` | {calls} | {nrows / max(calls, 1):.1f} | "
            f"{total_ms * 1000 / units:.1f} | {float(wal) / units:.0f} | {blocks / units:.1f} |"
        )
    return "\n".join(lines)


def _reset_statements(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def _costs(cost: dict[str, float], rate: float, label: str) -> str:
    server = cost.get("server_cpu_us_per_job")
    return (
        f"{label}: {rate:,.0f}/s while sampled; per job: client CPU "
        f"{cost['client_cpu_us_per_job']:.1f} µs, server CPU "
        f"{'–' if server is None else f'{server:.1f}'} µs, WAL {cost['wal_bytes_per_job']:.0f} "
        f"bytes, {cost['xacts_per_job']:.3f} transactions."
    )


class Profiler:
    """Runs each path once with everything attached."""

    def __init__(self, server: Server, settings: Settings, logs: Path) -> None:
        self.server = server
        self.s = settings
        self.logs = logs
        awa = next(p for p in PEERS if p.name == "awa")
        self.adapter = Adapter(awa, python_for(awa, logs / "venvs.log"), logs)
        self.info = self.adapter.call("describe")

    def _fresh(self) -> tuple[str, Meter]:
        url = self.server.fresh_database(DATABASE)
        self.adapter.call("setup", "--url", url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return url, Meter(self.server.admin_url, DATABASE)

    def worker(self, *extra: str) -> str:
        url, meter = self._fresh()
        jobs = self.s.jobs
        self.adapter.call("enqueue", "--url", url, "--jobs", str(jobs))
        worker = self.adapter.spawn("worker", "--url", url, *extra)
        worker.expect(timeout=120)
        raw = self.logs / f"profile-worker{''.join(extra)}.collapsed"
        spy = Spy(worker.pid, raw)
        _reset_statements(url)
        before = meter.read([worker.pid])
        began = time.perf_counter()
        worker.send("go")
        seen = wait_completed(url, self.info["completed_sql"], jobs, 600, worker)
        after = meter.read([worker.pid])
        worker.finish()
        spy.wait()
        time.sleep(0.3)
        cost = per_unit(before, after, jobs)
        cost["xacts_per_job"] = (meter.read([]).xacts - before.xacts) / jobs
        rate = jobs / ((seen or time.perf_counter()) - began)
        text = [
            _costs(cost, rate, f"W1, {jobs} jobs"),
            "",
            summarise(raw, "awa/"),
            "",
            _statements(url, jobs),
        ]
        self.server.drop_database(DATABASE)
        return "\n".join(text)

    def _client_path(self, command: str, units: int | None, *args: str, within: str) -> str:
        url, meter = self._fresh()
        before = meter.read([])
        proc: AdapterProcess = self.adapter.spawn(command, "--url", url, *args)
        raw = self.logs / f"profile-{command}.collapsed"
        spy = Spy(proc.pid, raw)
        _reset_statements(url)
        done = proc.expect(timeout=600)
        proc.kill(grace=10)
        spy.wait()
        time.sleep(0.3)
        units = units or done["count"]
        cost = per_unit(before, meter.read([]), units)
        cost["client_cpu_us_per_job"] = done["cpu_seconds"] * 1e6 / units
        rate = units / done["seconds"]
        text = [_costs(cost, rate, command), "", summarise(raw, within), ""]
        text.append(_statements(url, units))
        self.server.drop_database(DATABASE)
        return "\n".join(text)

    def inserts(self) -> str:
        seconds = str(max(self.s.w3_seconds, 4.0))
        return self._client_path("insert", None, "--seconds", seconds, within="insert_loop")

    def bulk(self) -> str:
        jobs = self.s.jobs * 10
        return self._client_path("enqueue", jobs, "--jobs", str(jobs), within="bulk")

    def explain(self) -> str:
        url, _ = self._fresh()
        self.adapter.call("enqueue", "--url", url, "--jobs", str(self.s.jobs))
        text = explain_hot_statements(url)
        self.server.drop_database(DATABASE)
        return text


def profile_awa(server: Server, settings: Settings, out: Path, logs: Path) -> None:
    """Profile every hot path once; write bench/results/profile.md."""
    profiler = Profiler(server, settings, logs)
    with psycopg.connect(server.admin_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    sections: list[tuple[str, Any]] = [
        ("W1 worker, default (asynchronous worker commits)", profiler.worker),
        ("W1 worker, durable (`synchronous_commit=True`)", lambda: profiler.worker("--durable")),
        ("W3 single inserts, one producer", profiler.inserts),
        ("Bulk `insert_many` (COPY)", profiler.bulk),
        ("The hot statements, `EXPLAIN (ANALYZE, BUFFERS, WAL)`", profiler.explain),
    ]
    parts = [
        f"Profiled on PostgreSQL {version[0] if version else '?'} with pg_stat_statements "
        "preloaded (`python bench/run.py --profile`); sampling slows the client, so rates "
        "here are lower than in the runs above.",
        "",
    ]
    for title, run in sections:
        print(f"profiling: {title}", flush=True)
        parts += [f"### {title}", "", run(), ""]
    text = "\n".join(parts)
    (out / "profile.md").write_text(text)
    print(text)
