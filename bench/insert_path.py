"""A/B of the producer path: what one ``insert`` costs against the best psycopg can do with
the same statement, and ``insert_many`` against a plain COPY of the same rows.

    python bench/insert_path.py [--rounds 5] [--seconds 1] [--bulk 20000] [--pg-bin DIR]

Variants run interleaved in short rounds on one server (the machine is shared: a busy
moment hits every variant alike), each on its own connection, TCP to 127.0.0.1 like the
side-by-side bench. Reported per insert (per job for bulk): wall µs, and the process's
user and system CPU µs (getrusage), medians over rounds. The psycopg rows are controls:
compare awa's row to them within one run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import awa
from awa.db import sql
from harness.server import start_server

Insert = Callable[[int], Awaitable[Any]]

PARAMS = {
    "kind": "noop",
    "queue": "default",
    "priority": 2,
    "max_attempts": 25,
    "tags": "{}",
    "metadata": "{}",
    "run_at": None,
    "unique_key": None,
    "unique_states": None,
    "ordering_key": None,
}
MINIMAL = "INSERT INTO awa.jobs (kind, queue, args) VALUES (%s, %s, %s::jsonb) RETURNING id"


def _usage() -> tuple[float, float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime


async def _measure(insert: Insert, seconds: float) -> tuple[float, float, float]:
    """(wall, user, system) µs per insert over ``seconds`` of back-to-back inserts."""
    await insert(-1)
    count = 0
    wall0, user0, sys0 = _usage()
    while time.perf_counter() - wall0 < seconds:
        await insert(count)
        count += 1
    wall1, user1, sys1 = _usage()
    return tuple(1e6 * d / count for d in (wall1 - wall0, user1 - user0, sys1 - sys0))  # type: ignore[return-value]


async def single_variants(url: str) -> dict[str, Insert]:
    client = awa.AsyncClient(url, max_connections=2)
    await client.__aenter__()
    raw = await psycopg.AsyncConnection.connect(url, autocommit=True)
    raw_binary = await psycopg.AsyncConnection.connect(url, autocommit=True)
    minimal = await psycopg.AsyncConnection.connect(url, autocommit=True)

    async def awa_insert(seq: int) -> None:
        await client.insert({"seq": seq}, kind="noop")

    async def psycopg_same_statement(seq: int) -> None:
        params = {**PARAMS, "args": f'{{"seq": {seq}}}'}
        cur = await raw.execute(sql.JOB_INSERT, params, prepare=True)
        await cur.fetchone()

    async def psycopg_binary(seq: int) -> None:
        params = {**PARAMS, "args": f'{{"seq": {seq}}}'}
        cur = raw_binary.cursor(binary=True)
        await cur.execute(sql.JOB_INSERT, params, prepare=True)
        await cur.fetchone()

    async def psycopg_minimal(seq: int) -> None:
        cur = await minimal.execute(MINIMAL, ("noop", "default", f'{{"seq": {seq}}}'), prepare=True)
        await cur.fetchone()

    return {
        "awa insert()": awa_insert,
        "psycopg, same statement, prepared": psycopg_same_statement,
        "psycopg, same statement, prepared, binary": psycopg_binary,
        "psycopg, 3-column INSERT … RETURNING id (no notify)": psycopg_minimal,
    }


async def bulk_variants(url: str, jobs: int) -> dict[str, Callable[[], Awaitable[Any]]]:
    client = awa.AsyncClient(url, max_connections=2)
    await client.__aenter__()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    rows = [{"seq": i} for i in range(jobs)]

    async def awa_insert_many() -> None:
        await client.insert_many(rows, kind="noop")

    async def psycopg_copy_text() -> None:
        # the floor: COPY of three columns, rows pre-formatted outside the timing loop
        async with conn.cursor().copy("COPY awa.jobs (kind, queue, args) FROM STDIN") as copy:
            await copy.write(text_rows)

    text_rows = "".join(f'noop\tdefault\t{{"seq": {i}}}\n' for i in range(jobs))
    return {
        "awa insert_many()": awa_insert_many,
        "psycopg COPY, 3 columns, pre-formatted": psycopg_copy_text,
    }


async def _measure_bulk(
    call: Callable[[], Awaitable[Any]], jobs: int
) -> tuple[float, float, float]:
    wall0, user0, sys0 = _usage()
    await call()
    wall1, user1, sys1 = _usage()
    return tuple(1e6 * d / jobs for d in (wall1 - wall0, user1 - user0, sys1 - sys0))  # type: ignore[return-value]


def _report(title: str, results: dict[str, list[tuple[float, float, float]]]) -> None:
    import awa as loaded

    print(f"\n{title} (awa from {Path(loaded.__file__).parent})")
    print("| variant | wall µs | user CPU µs | system CPU µs | per s |")
    print("|---|--:|--:|--:|--:|")
    for name, samples in results.items():
        wall, user, system = (statistics.median(s[i] for s in samples) for i in range(3))
        print(f"| {name} | {wall:.1f} | {user:.1f} | {system:.1f} | {1e6 / wall:,.0f} |")


async def run(url: str, args: argparse.Namespace) -> None:
    async with awa.AsyncClient(url) as client:
        await client.migrate()
    singles = await single_variants(url) if args.part in ("single", "both") else {}
    single_results: dict[str, list[tuple[float, float, float]]] = {n: [] for n in singles}
    bulks = await bulk_variants(url, args.bulk) if args.part in ("bulk", "both") else {}
    bulk_results: dict[str, list[tuple[float, float, float]]] = {n: [] for n in bulks}
    for r in range(args.rounds):
        order = list(singles) if r % 2 == 0 else list(reversed(singles))
        for name in order:
            single_results[name].append(await _measure(singles[name], args.seconds))
        for name in bulks if r % 2 == 0 else reversed(list(bulks)):
            bulk_results[name].append(await _measure_bulk(bulks[name], args.bulk))
    if singles:
        _report("Single inserts (one producer, back to back)", single_results)
    if bulks:
        _report(f"Bulk ({args.bulk} jobs per call), per job", bulk_results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--bulk", type=int, default=20_000)
    parser.add_argument("--part", choices=["single", "bulk", "both"], default="both")
    parser.add_argument("--pg-bin", help="initdb/pg_ctl from here instead of the embedded wheel")
    parser.add_argument(
        "--async-commit",
        action="store_true",
        help="synchronous_commit=off on every connection: takes the WAL flush (and a busy "
        "disk's noise) out, leaving client and server CPU and the round trip",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="awa-insert-") as work:
        server, source = start_server(args.pg_bin, Path(work))
        print(f"server: {source}")
        try:
            url = server.fresh_database("insert_path")
            if args.async_commit:
                url += "?options=-c%20synchronous_commit%3Doff"
            asyncio.run(run(url, args))
        finally:
            server.close()


if __name__ == "__main__":
    main()
