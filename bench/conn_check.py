"""What the dead-connection check (awa.db.pool) costs per call.

Client CPU time of ``alive()`` on an idle live connection, of a pool checkout and return
with and without the check, and of a ``get_job`` for scale. Uses DATABASE_URL, else a
throwaway embedded server.

    python bench/conn_check.py [--n 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

import awa
from awa.db.pool import Pool, alive
from awa.embedded import EmbeddedPostgres


async def _per_call_us(step: Callable[[], Awaitable[Any]], n: int, repeat: int) -> float:
    """Median over ``repeat`` runs of the mean CPU time (this thread) of one ``step``, in
    µs: what a call costs the client, steadier than wall time on a shared machine."""
    runs = []
    for _ in range(repeat):
        start = time.thread_time()
        for _ in range(n):
            await step()
        runs.append((time.thread_time() - start) / n * 1e6)
    return statistics.median(runs)


async def _checkout(pool: AsyncConnectionPool) -> None:
    async with pool.connection():
        pass


async def main(url: str, n: int, repeat: int) -> None:
    async with awa.AsyncClient(url) as client:
        await client.migrate()
        job = await client.insert({}, kind="bench")
        plain = AsyncConnectionPool(url, min_size=1, max_size=1, open=False)
        checked = Pool(url, min_size=1, max_size=1, open=False)
        await plain.open(wait=True)
        await checked.open(wait=True)
        try:
            async with checked.connection() as conn:

                async def check() -> None:
                    alive(conn)

                check_us = await _per_call_us(check, n, repeat)
            plain_us = await _per_call_us(lambda: _checkout(plain), n, repeat)
            checked_us = await _per_call_us(lambda: _checkout(checked), n, repeat)
            get_us = await _per_call_us(lambda: client.get_job(job.id), n // 10, repeat)
        finally:
            await plain.close()
            await checked.close()
    print("client CPU per call:")
    print(f"alive() on an idle connection   {check_us:7.2f} µs")
    print(f"checkout + return, no check     {plain_us:7.2f} µs")
    print(f"checkout + return, with check   {checked_us:7.2f} µs  (+{checked_us - plain_us:.2f})")
    print(f"client.get_job                  {get_us:7.2f} µs")


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    if url:
        asyncio.run(main(url, args.n, args.repeat))
        return
    with tempfile.TemporaryDirectory(prefix="awa-bench-") as root:
        server = EmbeddedPostgres(os.path.join(root, "pgdata"))
        try:
            asyncio.run(main(server.start(), args.n, args.repeat))
        finally:
            server.destroy()


if __name__ == "__main__":
    run()
