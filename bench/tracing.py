"""What OpenTelemetry tracing costs: W1 drain and W3 single inserts in three modes.

- ``absent``: ``opentelemetry`` cannot be imported (as in a plain ``pip install awa``);
- ``api``: the API is importable but no SDK is configured (tracing is off);
- ``sdk``: an SDK tracer provider with a batch processor and an exporter that drops
  spans, so every attempt records a span and every insert inside a span carries its
  ``traceparent`` (W3 runs inside one span in this mode).

Each run is its own process on a fresh schema; modes are interleaved in every
repetition and medians reported, with the client process's CPU time per job, which
the other load on a shared machine disturbs far less than wall-clock rates. Uses
DATABASE_URL, else a throwaway embedded server without fsync.

    python bench/tracing.py [--jobs 20000] [--seconds 5] [--repeat 3]
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
from contextlib import nullcontext
from typing import Any

MODES = ("absent", "api", "sdk")


def _prepare(mode: str) -> Any:
    """Set the process up for ``mode``; returns a tracer for W3's producer span, or None."""
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # import fails
        return None
    if mode == "api":
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("bench")


async def _fresh(url: str) -> None:
    import psycopg

    import awa

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("DROP SCHEMA IF EXISTS awa CASCADE")
    async with awa.AsyncClient(url) as client:
        await client.migrate()


async def w1_drain(url: str, jobs: int) -> tuple[float, float]:
    import awa

    await _fresh(url)
    async with awa.AsyncClient(url, max_connections=16) as client:

        @client.task(None, kind="noop", queue="bench")
        async def noop(job: awa.Job[Any]) -> None:
            return None

        await client.insert_many([{"n": i} for i in range(jobs)], kind="noop", queue="bench")
        start, cpu = time.perf_counter(), time.process_time()
        await client.start([("bench", 32)])
        while True:
            (stat,) = await client.queue_stats()
            if stat.completed >= jobs:
                break
            await asyncio.sleep(0.02)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        await client.shutdown()
    return jobs / elapsed, cpu / jobs * 1e6


async def w3_inserts(url: str, seconds: float, tracer: Any) -> tuple[float, float]:
    import awa

    await _fresh(url)
    span = tracer.start_as_current_span("producer") if tracer is not None else nullcontext()
    async with awa.AsyncClient(url) as client:
        await client.insert({"n": 0}, kind="bench")  # warm the pool
        with span:
            count, start, cpu = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds:
                await client.insert({"n": count}, kind="bench")
                count += 1
            cpu = time.process_time() - cpu
            return count / (time.perf_counter() - start), cpu / count * 1e6


def _child(mode: str, url: str, jobs: int, seconds: float) -> None:
    tracer = _prepare(mode)
    drain, drain_cpu = asyncio.run(w1_drain(url, jobs))
    inserts, insert_cpu = asyncio.run(w3_inserts(url, seconds, tracer))
    print(json.dumps({"w1": drain, "w1_cpu": drain_cpu, "w3": inserts, "w3_cpu": insert_cpu}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    if args.child:
        assert url is not None
        _child(args.child, url, args.jobs, args.seconds)
        return
    server = None
    if not url:
        from awa.embedded import EmbeddedPostgres

        # No fsync: commits are cheap, so what differs between the modes (client CPU)
        # is not hidden behind the disk.
        server = EmbeddedPostgres(
            os.path.join(tempfile.mkdtemp(prefix="awa-bench-"), "pg"),
            settings={"fsync": "off", "synchronous_commit": "off"},
        )
        url = server.start()
    keys = {
        "w1": "W1 drain jobs/s",
        "w1_cpu": "W1 client CPU µs/job",
        "w3": "W3 inserts/s",
        "w3_cpu": "W3 client CPU µs/insert",
    }
    results = {mode: {key: [] for key in keys} for mode in MODES}
    try:
        for _ in range(args.repeat):
            for mode in MODES:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, "--jobs", str(args.jobs),
                     "--seconds", str(args.seconds)],
                    env={**os.environ, "DATABASE_URL": url},
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                run = json.loads(out.stdout.strip().splitlines()[-1])
                for key in keys:
                    results[mode][key].append(run[key])
    finally:
        if server is not None:
            server.destroy()
    for key, label in keys.items():
        base = statistics.median(results["absent"][key])
        for mode in MODES:
            values = results[mode][key]
            med = statistics.median(values)
            print(f"{label:24} {mode:7} median {med:9.1f}  min {min(values):9.1f}  "
                  f"max {max(values):9.1f}  ×{med / base:.3f} of absent")  # fmt: skip


if __name__ == "__main__":
    main()
