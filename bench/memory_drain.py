"""Worker memory through a drain of big jobs: RSS before, at the peak, and after.

Inserts ``--jobs`` jobs of ``--args-mib`` MiB of args each, starts a worker process
(``max_workers`` = ``--permits``, handlers that sleep ``--handler-ms``), waits until every
job completed, then samples the worker's RSS for ``--settle`` seconds. Uses DATABASE_URL,
else a throwaway embedded server.

    python bench/memory_drain.py [--jobs 512] [--args-mib 1] [--permits 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

import awa
from awa.embedded import EmbeddedPostgres

WORKER = """
import asyncio, json, os, sys
import awa
client = awa.AsyncClient(os.environ["BENCH_URL"])
settings = json.loads(os.environ["BENCH_SETTINGS"])

@client.task(None, kind="big", queue="big")
async def big(job):
    await asyncio.sleep(float(os.environ["BENCH_HANDLER_MS"]) / 1000)

async def main():
    await client.start([("big", int(os.environ["BENCH_PERMITS"]))], **settings)
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def completed(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
    return int(row[0]) if row else 0


async def insert(url: str, jobs: int, args_mib: float) -> None:
    blob = "x" * int(args_mib * 1024 * 1024 - 100)
    async with awa.AsyncClient(url) as client:
        await client.migrate()
        for start in range(0, jobs, 32):
            batch = [{"blob": blob, "n": i} for i in range(start, min(start + 32, jobs))]
            await client.insert_many(batch, kind="big", queue="big")


def run(url: str, args: argparse.Namespace) -> dict[str, float]:
    asyncio.run(insert(url, args.jobs, args.args_mib))
    env = {
        **os.environ,
        "BENCH_URL": url,
        "BENCH_PERMITS": str(args.permits),
        "BENCH_HANDLER_MS": str(args.handler_ms),
        "BENCH_SETTINGS": json.dumps(json.loads(args.settings)),
    }
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        before = rss_mib(proc.pid)
        peak = before
        while completed(url) < args.jobs:
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.05)
        drained = rss_mib(proc.pid)
        deadline = time.monotonic() + args.settle
        while time.monotonic() < deadline:
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.1)
        after = rss_mib(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    return {"before": before, "peak": peak, "at_drain": drained, "after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=512)
    parser.add_argument("--args-mib", type=float, default=1.0)
    parser.add_argument("--permits", type=int, default=512)
    parser.add_argument("--handler-ms", type=float, default=100)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--settings", default="{}", help="JSON of extra start() settings")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    if url:
        result = run(url, args)
    else:
        with tempfile.TemporaryDirectory(prefix="awa-bench-") as root:
            server = EmbeddedPostgres(os.path.join(root, "pgdata"))
            try:
                result = run(server.start(), args)
            finally:
                server.destroy()
    print(
        f"worker RSS (MiB): before {result['before']:.0f}, peak {result['peak']:.0f}, "
        f"at drain {result['at_drain']:.0f}, {args.settle:g} s later {result['after']:.0f}"
    )


if __name__ == "__main__":
    main()
