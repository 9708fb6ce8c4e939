"""procrastinate with its psycopg 3 connector.

Bulk: ``Task.batch_defer_async`` (one INSERT … unnest). Worker: ``run_worker_async(
concurrency=32)``, everything else default (``listen_notify=True``, polling every 5 s,
jobs kept after completion). The connector's pool is psycopg_pool's default (4 connections).
"""

from __future__ import annotations

import asyncio
import contextlib
from importlib.metadata import version
from typing import Any

import _common as c
import procrastinate

NOTES = [
    "Concurrency knob: run_worker_async(concurrency=32); the connection pool keeps "
    "psycopg_pool's default size (4), as PsycopgConnector does unless told otherwise.",
    "psycopg[binary] is installed alongside (procrastinate depends on plain psycopg, "
    "which would otherwise need the system libpq); awa uses the same binary driver.",
]


def build_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop(seq: int) -> None:
        c.record_start(seq)
        if c.has_body():
            await c.job_body(seq)

    return app


def describe(args: Any) -> None:
    c.emit(
        {
            "system": "procrastinate",
            "version": version("procrastinate"),
            "completed_sql": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    app = build_app(args.url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def enqueue(args: Any) -> None:
    app = build_app(args.url)
    task = app.tasks["noop"]
    kwargs = [{"seq": i} for i in range(args.jobs)]
    async with app.open_async():

        async def bulk() -> None:
            await task.batch_defer_async(*kwargs)

        c.emit(await c.timed(bulk))


async def worker(args: Any) -> None:
    app = build_app(args.url)
    running: list[asyncio.Task[None]] = []
    async with app.open_async():

        async def start() -> None:
            coro = app.run_worker_async(concurrency=args.concurrency, install_signal_handlers=False)
            running.append(asyncio.create_task(coro))

        async def stop() -> None:
            running[0].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(running[0], 30)

        await c.serve_worker(args, start, stop)


async def produce(args: Any) -> None:
    app = build_app(args.url)
    task = app.tasks["noop"]
    async with app.open_async():

        async def insert_one(seq: int) -> None:
            await task.defer_async(seq=seq)

        if args.command == "produce":
            await c.produce_steady(insert_one, args.rate, args.seconds)
        else:
            await c.insert_loop(insert_one, args.seconds)


def main() -> None:
    args = c.parse_args()
    if args.command == "describe":
        describe(args)
        return
    commands = {"setup": setup, "enqueue": enqueue, "worker": worker}
    asyncio.run(commands.get(args.command, produce)(args))


if __name__ == "__main__":
    main()
