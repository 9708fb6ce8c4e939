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
from harness.meter import Meter, per_unit
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
    processes: tuple[int, ...] = (1, 2, 4)  # W1×P (1 comes from W1 itself)
    w5_jobs: int = 2_000
    w5_work_ms: float = 2.0
    w5_processes: tuple[int, ...] = (1, 2)
    w6_jobs: int = 6_000
    w6_cap: int = 20
    w6_processes: int = 3
    w6_sleep_ms: float = 10.0
    idle_queues: tuple[int, ...] = (1, 100, 1000)
    idle_processes: tuple[int, ...] = (1, 10)
    idle_seconds: float = 10.0
    # 10 idle processes are skipped where one already sends more than this / 10 (the
    # machine is shared; ten would saturate it and measure the queueing, not the cost)
    idle_budget: float = 2_000.0

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            jobs=4_000,
            w2_seconds=5.0,
            w3_seconds=2.0,
            ceiling_seconds=2.0,
            w5_jobs=600,
            w6_jobs=2_000,
            idle_seconds=5.0,
        )


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default) of a non-empty list."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def wait_completed(
    url: str,
    query: str,
    target: int,
    timeout: float,
    workers: list[AdapterProcess] | AdapterProcess | None = None,
) -> float | None:
    """Poll the system's own tables until ``target`` jobs show completed.

    Returns the ``perf_counter`` time it was seen, or None on timeout or when a worker
    exits. Polls every 50 ms, every 10 ms for the last tenth, so the clock overshoots by a
    few ms at most.
    """
    if isinstance(workers, AdapterProcess):
        workers = [workers]
    deadline = time.perf_counter() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.perf_counter() < deadline:
            if any(w.proc.poll() is not None for w in workers or []):
                return None
            row = conn.execute(query).fetchone()
            done = int(row[0]) if row else 0
            if done >= target:
                return time.perf_counter()
            time.sleep(0.01 if done >= 0.9 * target else 0.05)
    return None


def slot_gaps(starts: list[float], ends: list[float]) -> list[float]:
    """Milliseconds from each job's end (a slot freeing) to the next start not yet matched
    to an earlier end; ends after the last start (the backlog was empty) are left out."""
    gaps, i = [], 0
    for end in ends:
        while i < len(starts) and starts[i] < end:
            i += 1
        if i == len(starts):
            break
        gaps.append((starts[i] - end) * 1000)
        i += 1
    return gaps


def max_overlap(starts: list[float], ends: list[float]) -> int:
    """The most jobs running at one instant, from recorded handler start and end times."""
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends])  # ends first at a tie
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


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

    def _start_workers(
        self, adapter: Adapter, processes: int, url: str, *args: str, split: int = 32
    ) -> list[AdapterProcess]:
        """``processes`` workers sharing ``split`` handlers evenly (the first get the rest)."""
        workers = []
        try:
            for i in range(processes):
                share = split // processes + (1 if i < split % processes else 0)
                workers.append(
                    adapter.spawn("worker", "--url", url, "--concurrency", str(share), *args)
                )
            for worker in workers:
                worker.expect(timeout=120)  # ready: imported, connected, handler registered
        except BaseException:
            for worker in workers:
                worker.kill()
            raise
        return workers

    def drain(
        self,
        adapter: Adapter,
        info: dict[str, Any],
        *extra: str,
        processes: int = 1,
        jobs: int | None = None,
        handler: tuple[str, ...] = (),
        split: int = 32,
    ) -> dict[str, Any]:
        """W1 (W4 with ``extra``, W1×P with ``processes``, W5 with a CPU ``handler``): bulk
        enqueue, then time the workers draining it, ``split`` handlers shared between them;
        what it cost per job beside."""
        database = "bench_drain"
        url = self._prepare(adapter, database)
        jobs = jobs or self.s.jobs
        meter = Meter(self.server.admin_url, database)
        before = meter.read([])
        enqueued = adapter.call("enqueue", "--url", url, "--jobs", str(jobs), *extra)
        after_enqueue = meter.read([])
        workers = self._start_workers(adapter, processes, url, *extra, *handler, split=split)
        pids = [w.pid for w in workers]
        samplers = [PeakSampler(pid) for pid in pids]
        try:
            began_reading = meter.read(pids)
            began = time.perf_counter()
            for worker in workers:
                worker.send("go")
            timeout = max(300, jobs / 20)
            seen = wait_completed(url, info["completed_sql"], jobs, timeout, workers)
            ended_reading = meter.read(pids)
            peaks = [sampler.stop() for sampler in samplers]
            for worker in workers:
                worker.finish()
        finally:
            for sampler in samplers:
                sampler.stop()
            for worker in workers:
                worker.kill()
        time.sleep(0.3)  # exited backends publish their transaction counts
        finished = meter.read([])
        self.server.drop_database(database)
        if seen is None:
            raise WorkloadFailed(f"{jobs} jobs not completed in time")
        cost = per_unit(began_reading, ended_reading, jobs)
        cost["xacts_per_job"] = (finished.xacts - after_enqueue.xacts) / jobs
        bulk = per_unit(before, after_enqueue, jobs)
        return {
            "enqueue_jobs_per_s": jobs / enqueued["seconds"],
            "enqueue_client_cpu_us_per_job": enqueued.get("cpu_seconds", 0) * 1e6 / jobs,
            "enqueue_server_cpu_us_per_job": bulk.get("server_cpu_us_per_job"),
            "enqueue_wal_bytes_per_job": bulk["wal_bytes_per_job"],
            "drain_jobs_per_s": jobs / (seen - began),
            "drain_seconds": seen - began,
            "peak_rss_mb": max(peaks) / MB,
            "processes": processes,
            **cost,
        }

    def scale_out(
        self, adapter: Adapter, info: dict[str, Any], processes: int, *, each: bool = False
    ) -> dict[str, Any]:
        """W1×P: W1 with 32 handlers split evenly over ``processes`` worker processes, or
        with 32 handlers in ``each`` of them (the other way to scale out)."""
        split = 32 * processes if each else 32
        result = self.drain(adapter, info, processes=processes, split=split)
        result["per_process_jobs_per_s"] = result["drain_jobs_per_s"] / processes
        return result

    def cpu_bound(
        self, adapter: Adapter, info: dict[str, Any], processes: int, rounds: int
    ) -> dict[str, Any]:
        """W5: ``w5_jobs`` jobs of ``rounds`` of pure-Python work each (≈ w5_work_ms)."""
        handler = ("--work", str(rounds))
        return self.drain(adapter, info, processes=processes, jobs=self.s.w5_jobs, handler=handler)

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
        meter = Meter(self.server.admin_url, database)
        before = meter.read([])
        done = adapter.call("insert", "--url", url, "--seconds", str(self.s.w3_seconds))
        time.sleep(0.3)  # the producer's backend publishes its transaction count on exit
        cost = per_unit(before, meter.read([]), done["count"])
        self.server.drop_database(database)
        cost["client_cpu_us_per_job"] = done.get("cpu_seconds", 0) * 1e6 / done["count"]
        return {"inserts_per_s": done["count"] / done["seconds"], **cost}

    def fleet_cap(self, adapter: Adapter, info: dict[str, Any], capped: bool) -> dict[str, Any]:
        """W6: 3 processes drain 10 ms jobs of one queue, either under a fleet-wide cap of
        20 (each process may run 20) or with no cap and 20 handlers split 7/7/6. Both allow
        20 at once, so the ratio is what enforcing the cap across processes costs."""
        database = "bench_fleet_cap"
        url = self.server.fresh_database(database)
        cap = self.s.w6_cap
        prepared = adapter.call("setup", "--url", url, "--cap", str(cap if capped else 0))
        if "skipped" in prepared:
            self.server.drop_database(database)
            return {"skipped": prepared["skipped"]}
        jobs, processes = self.s.w6_jobs, self.s.w6_processes
        adapter.call("enqueue", "--url", url, "--jobs", str(jobs))
        handler = ("--record", "--sleep-ms", str(self.s.w6_sleep_ms))
        split = cap * processes if capped else cap
        workers = self._start_workers(adapter, processes, url, *handler, split=split)
        try:
            began = time.perf_counter()
            for worker in workers:
                worker.send("go")
            for worker in workers:
                worker.expect(timeout=60)  # started
            seen = wait_completed(url, info["completed_sql"], jobs, max(300, jobs / 20), workers)
            done = [worker.finish() for worker in workers]
        finally:
            for worker in workers:
                worker.kill()
        self.server.drop_database(database)
        if seen is None:
            raise WorkloadFailed(f"{jobs} jobs not completed in time")
        starts = sorted(t for d in done for _, t in d["starts"])
        ends = sorted(t for d in done for _, t in d["ends"])
        gaps = slot_gaps(starts, ends)
        result: dict[str, Any] = {
            "jobs_per_s": jobs / (seen - began),
            "max_running": max_overlap(starts, ends),
        }
        if gaps:
            result["slot_gap_p50_ms"] = percentile(gaps, 50)
            result["slot_gap_p99_ms"] = percentile(gaps, 99)
        return result

    def idle(self, adapter: Adapter, queues: int, processes: int) -> dict[str, Any]:
        """Idle: ``processes`` workers on ``queues`` empty queues; what they cost the server
        (transactions, i.e. statements, per second; server CPU) and themselves."""
        database = "bench_idle"
        url = self._prepare(adapter, database)
        meter = Meter(self.server.admin_url, database)
        workers = []
        try:
            for _ in range(processes):
                workers.append(adapter.spawn("idle", "--url", url, "--queues", str(queues)))
            for worker in workers:
                worker.expect(timeout=120)
            for worker in workers:
                worker.send("go")
            for worker in workers:
                worker.expect(timeout=120)  # started
            time.sleep(2.0)  # start-up statements (registration, first polls) settle
            pids = [w.pid for w in workers]
            before = meter.read(pids)
            time.sleep(self.s.idle_seconds)
            after = meter.read(pids)
            for worker in workers:
                worker.finish()
        finally:
            for worker in workers:
                worker.kill()
        self.server.drop_database(database)
        seconds = self.s.idle_seconds
        result = {
            "queues": queues,
            "processes": processes,
            "statements_per_s": (after.xacts - before.xacts) / seconds,
            "client_cpu_percent": (after.client_cpu - before.client_cpu) * 100 / seconds,
        }
        if before.server_cpu is not None and after.server_cpu is not None:
            result["server_cpu_percent"] = (after.server_cpu - before.server_cpu) * 100 / seconds
        return result

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
