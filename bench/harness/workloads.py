"""The workloads of BENCHMARKS.md, each against a fresh database of the shared server."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from harness.adapter import Adapter, AdapterProcess
from harness.procstat import PeakSampler
from harness.server import Server

MB = 1024 * 1024


class WorkloadFailed(Exception):
    """A run did not finish as the workload requires (timeout, missing completions)."""


@dataclass(frozen=True)
class Settings:
    """Sizes and durations; ``quick()`` shrinks them for development runs."""

    jobs: int = 20_000
    w2_rate: float = 200.0
    w2_seconds: float = 15.0
    w3_seconds: float = 5.0
    ceiling_seconds: float = 5.0
    ceiling_clients: tuple[int, ...] = (1, 4, 32)

    @classmethod
    def quick(cls) -> Settings:
        return cls(jobs=4_000, w2_seconds=5.0, w3_seconds=2.0, ceiling_seconds=2.0)


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default) of a non-empty list."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def wait_completed(
    url: str, query: str, target: int, timeout: float, worker: AdapterProcess | None = None
) -> float | None:
    """Poll the system's own tables until ``target`` jobs show completed.

    Returns the ``perf_counter`` time it was seen, or None on timeout or when ``worker``
    exits. Polls every 50 ms,
    every 10 ms for the last tenth, so the clock overshoots by a few ms at most.
    """
    deadline = time.perf_counter() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.perf_counter() < deadline:
            if worker is not None and worker.proc.poll() is not None:
                return None
            row = conn.execute(query).fetchone()
            done = int(row[0]) if row else 0
            if done >= target:
                return time.perf_counter()
            time.sleep(0.01 if done >= 0.9 * target else 0.05)
    return None


class Runner:
    """Runs workloads for the systems against one server."""

    def __init__(self, server: Server, settings: Settings) -> None:
        self.server = server
        self.s = settings

    def _prepare(self, adapter: Adapter, database: str) -> str:
        url = self.server.fresh_database(database)
        adapter.call("setup", "--url", url, timeout=300)
        return url

    def _start_worker(self, adapter: Adapter, *args: str) -> AdapterProcess:
        worker = adapter.spawn("worker", *args)
        worker.expect(timeout=120)  # ready: imported, connected, handler registered
        return worker

    def drain(self, adapter: Adapter, info: dict[str, Any], *extra: str) -> dict[str, Any]:
        """W1 (and W4 with ``extra``): bulk enqueue, then time one worker draining it."""
        database = "bench_drain"
        url = self._prepare(adapter, database)
        jobs = self.s.jobs
        enqueued = adapter.call("enqueue", "--url", url, "--jobs", str(jobs), *extra)
        worker = self._start_worker(adapter, "--url", url, *extra)
        sampler = PeakSampler(worker.pid)
        try:
            began = time.perf_counter()
            worker.send("go")
            timeout = max(300, jobs / 20)
            seen = wait_completed(url, info["completed_sql"], jobs, timeout, worker)
            peak = sampler.stop()
            worker.finish()
        finally:
            sampler.stop()
            worker.kill()
        self.server.drop_database(database)
        if seen is None:
            raise WorkloadFailed(f"{jobs} jobs not completed in time")
        return {
            "enqueue_jobs_per_s": jobs / enqueued["seconds"],
            "drain_jobs_per_s": jobs / (seen - began),
            "drain_seconds": seen - began,
            "peak_rss_mb": peak / MB,
        }

    def latency(self, adapter: Adapter, info: dict[str, Any]) -> dict[str, Any]:
        """W2: a steady single-insert producer next to a running worker."""
        database = "bench_latency"
        url = self._prepare(adapter, database)
        worker = self._start_worker(adapter, "--url", url, "--record")
        try:
            worker.send("go")
            worker.expect(timeout=60)  # started
            time.sleep(1.0)  # let every loop of the worker settle before the first insert
            rate, seconds = str(self.s.w2_rate), str(self.s.w2_seconds)
            produced = adapter.call(
                "produce",
                "--url",
                url,
                "--rate",
                rate,
                "--seconds",
                seconds,
                timeout=3 * self.s.w2_seconds + 60,
            )
            commits = produced["commits"]
            wait_completed(url, info["completed_sql"], len(commits), timeout=10)
            starts = dict(worker.finish()["starts"])
        finally:
            worker.kill()
        self.server.drop_database(database)
        latencies = [(starts[seq] - t) * 1000 for seq, t in commits if seq in starts]
        result: dict[str, Any] = {
            "inserted": len(commits),
            "missing": len(commits) - len(latencies),
            "producer_rate": len(commits) / produced["seconds"],
        }
        if latencies:
            for p in (50, 95, 99):
                result[f"p{p}_ms"] = percentile(latencies, p)
            result["max_ms"] = max(latencies)
        return result

    def insert(self, adapter: Adapter) -> dict[str, Any]:
        """W3: one producer, single inserts back to back, no worker."""
        database = "bench_insert"
        url = self._prepare(adapter, database)
        done = adapter.call("insert", "--url", url, "--seconds", str(self.s.w3_seconds))
        self.server.drop_database(database)
        return {"inserts_per_s": done["count"] / done["seconds"]}

    def ceiling(self) -> dict[str, Any]:
        """pgbench: one-row ``UPDATE … RETURNING`` per transaction at 1 / 4 / 32 clients."""
        database = "bench_ceiling"
        url = self.server.fresh_database(database)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE ceiling (id int PRIMARY KEY, n bigint NOT NULL)")
            conn.execute("INSERT INTO ceiling SELECT g, 0 FROM generate_series(1, 1000) g")
            conn.execute("VACUUM ANALYZE ceiling")
        script = "UPDATE ceiling SET n = n + 1 WHERE id = :client_id + 1 RETURNING n;\n"
        result: dict[str, Any] = {}
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as out:
            out.write(script)
        try:
            for clients in self.s.ceiling_clients:
                threads = min(clients, os.cpu_count() or 1)
                command = [
                    str(self.server.bin / "pgbench"),
                    "-n",
                    "-M",
                    "prepared",
                    "-c",
                    str(clients),
                    "-j",
                    str(threads),
                    "-T",
                    str(int(self.s.ceiling_seconds)),
                    "-f",
                    out.name,
                    url,
                ]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                match = re.search(r"tps = ([\d.]+)", done.stdout)
                if match is None:
                    raise WorkloadFailed(f"pgbench printed no tps: {done.stdout[-300:]}")
                result[f"tps_{clients}"] = float(match.group(1))
        finally:
            os.unlink(out.name)
            self.server.drop_database(database)
        return result
