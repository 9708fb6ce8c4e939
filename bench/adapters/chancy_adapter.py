"""chancy, with the AsyncExecutor its docs name for async, I/O-bound jobs.

Setup declares the queue ``default`` with ``concurrency=32``,
``executor=Chancy.Executor.Async`` and ``eager_polling=True`` (queue settings live in
chancy's database). Bulk:
``Chancy.push_many`` (default batch of 1000 jobs per transaction). Worker: one ``Worker``
with its default plugins (leadership, pruner, recovery, metrics, workflows).
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version
from typing import Any

import _common as c
from chancy import Chancy, Job, Queue, Worker


async def noop(seq: int) -> None:
    c.record_start(seq)
    if c.has_body():
        await c.job_body(seq)


NOTES = [
    "Concurrency knob: Queue('default', concurrency=32); executor switched from the "
    "default ProcessExecutor to the documented AsyncExecutor, since the handler is async.",
    "eager_polling=True on the queue (documented for queues where jobs are continuously "
    "available): with the default, a worker that has filled its 32 slots waits for the "
    "5 s polling_interval or a push notice before fetching again, i.e. ~6 jobs/s on W1.",
    "chancy's default logger writes one INFO line per job pulled; kept (default).",
    "Job updates are flushed by the worker once a second (send_outgoing_interval = 1, "
    "the default), which bounds how soon completion is visible.",
    "psycopg[binary] is installed alongside (chancy depends on plain psycopg).",
]


def noop_job(seq: int) -> Job:
    return Job.from_func(noop, kwargs={"seq": seq})


def describe(args: Any) -> None:
    c.emit(
        {
            "system": "chancy",
            "version": version("chancy"),
            "completed_sql": "SELECT count(*) FROM chancy_jobs WHERE state = 'succeeded'",
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    async with Chancy(args.url) as chancy:
        await chancy.migrate()
        queue = Queue(
            "default",
            concurrency=args.concurrency,
            executor=Chancy.Executor.Async,
            eager_polling=True,
        )
        await chancy.declare(queue, upsert=True)


async def enqueue(args: Any) -> None:
    jobs = [noop_job(i) for i in range(args.jobs)]
    async with Chancy(args.url) as chancy:

        async def bulk() -> None:
            async for _ in chancy.push_many(jobs):
                pass

        c.emit(await c.timed(bulk))


async def worker(args: Any) -> None:
    async with Chancy(args.url) as chancy:
        running = Worker(chancy, register_signal_handlers=False)

        async def start() -> None:
            await running.start()

        async def stop() -> None:
            await running.stop()

        await c.serve_worker(args, start, stop)


async def produce(args: Any) -> None:
    async with Chancy(args.url) as chancy:

        async def insert_one(seq: int) -> None:
            await chancy.push(noop_job(seq))

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
