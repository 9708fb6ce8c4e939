"""oban (the Python port of Oban), which needs Python ≥ 3.12.

Bulk: ``Oban.enqueue_many`` (one prepared INSERT per job on one connection). Worker:
``Oban(pool=…, queues={"default": 32})`` with an async ``process`` method; pool from
``Oban.create_pool`` (defaults: 1–10 connections). Stager, pruner and the rest default.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version
from typing import Any

import _common as c
from oban import Oban, worker
from oban.schema import install


@worker(queue="default")
class Noop:
    async def process(self, job: Any) -> None:
        seq = job.args["seq"]
        c.record_start(seq)
        if c.has_body():
            await c.job_body(seq)


NOTES = [
    "Concurrency knob: queues={'default': 32}; pool from Oban.create_pool (max 10).",
    "enqueue_many is oban's bulk API, but 0.7 runs one INSERT per job inside it.",
]


def describe(args: Any) -> None:
    c.emit(
        {
            "system": "oban",
            "version": version("oban"),
            "completed_sql": "SELECT count(*) FROM oban_jobs WHERE state = 'completed'",
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    pool = await Oban.create_pool(args.url)
    await install(pool)
    await pool.close()


async def enqueue(args: Any) -> None:
    pool = await Oban.create_pool(args.url)
    oban = Oban(pool=pool)
    jobs = [Noop.new({"seq": i}) for i in range(args.jobs)]

    async def bulk() -> None:
        await oban.enqueue_many(jobs)

    c.emit(await c.timed(bulk))
    await pool.close()


async def run_worker(args: Any) -> None:
    pool = await Oban.create_pool(args.url)
    oban = Oban(pool=pool, queues={"default": args.concurrency})

    async def start() -> None:
        await oban.start()

    async def stop() -> None:
        await oban.stop()
        await pool.close()

    await c.serve_worker(args, start, stop)


async def produce(args: Any) -> None:
    pool = await Oban.create_pool(args.url)
    oban = Oban(pool=pool)

    async def insert_one(seq: int) -> None:
        await oban.enqueue(Noop.new({"seq": seq}))

    if args.command == "produce":
        await c.produce_steady(insert_one, args.rate, args.seconds)
    else:
        await c.insert_loop(insert_one, args.seconds)
    await pool.close()


def main() -> None:
    args = c.parse_args()
    if args.command == "describe":
        describe(args)
        return
    commands = {"setup": setup, "enqueue": enqueue, "worker": run_worker}
    asyncio.run(commands.get(args.command, produce)(args))


if __name__ == "__main__":
    main()
