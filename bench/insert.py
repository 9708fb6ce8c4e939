"""Producer throughput: single ``insert`` in a loop (one producer) and ``insert_many`` of
10 000 jobs. Uses DATABASE_URL, else a throwaway embedded server with default durability.

    python bench/insert.py [--seconds 5] [--bulk 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import psycopg

import awa
from awa.embedded import EmbeddedPostgres


async def _fresh(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("DROP SCHEMA IF EXISTS awa CASCADE")
    async with awa.AsyncClient(url) as client:
        await client.migrate()


async def single_inserts(url: str, seconds: float) -> float:
    async with awa.AsyncClient(url) as client:
        await client.insert({"n": 0}, kind="bench")  # warm the pool
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            await client.insert({"n": count}, kind="bench")
            count += 1
        return count / (time.perf_counter() - start)


async def bulk_insert(url: str, n: int) -> float:
    async with awa.AsyncClient(url) as client:
        payload = [{"n": i} for i in range(n)]
        start = time.perf_counter()
        await client.insert_many(payload, kind="bench")
        return n / (time.perf_counter() - start)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    server = None
    if not url:
        server = EmbeddedPostgres(os.path.join(tempfile.mkdtemp(prefix="awa-bench-"), "pg"))
        url = server.start()
    try:
        singles, bulks = [], []
        for _ in range(args.repeat):
            await _fresh(url)
            singles.append(await single_inserts(url, args.seconds))
            await _fresh(url)
            bulks.append(await bulk_insert(url, args.bulk))
        for name, values in (("insert (single, 1 producer)", singles),
                             (f"insert_many ({args.bulk})", bulks)):  # fmt: skip
            print(
                f"{name:<30} median {statistics.median(values):>10,.0f} jobs/s  "
                f"(min {min(values):,.0f} – max {max(values):,.0f}, n={len(values)})"
            )
    finally:
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    asyncio.run(main())
