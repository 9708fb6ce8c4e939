"""awa (this repository), through its public API only. Runs in /work/main/.venv, or in
bench/.venvs/awa-uvloop with ``--uvloop``.

Fastest path: ``insert_many`` (COPY) for bulk, ``insert`` for single jobs, one async no-op
handler, ``start([("default", 32)])``. W4 runs 4 queues hard-reserved at 8 each, or weighted
with ``global_max_workers=32`` and default ``QueueConfig`` (min_workers 0, weight 1).
"""

from __future__ import annotations

import asyncio
from typing import Any

import _common as c

import awa

MAX_CONNECTIONS = 10  # the AsyncClient default, the same as most peers' pool defaults

NOTES = [
    "Default settings: AsyncClient(max_connections=10), poll_interval_ms=200, "
    "claim_batch_size=512.",
]


def describe(args: Any) -> None:
    c.emit(
        {
            "system": "awa (uvloop)" if args.uvloop else "awa",
            "version": awa.__version__,
            "completed_sql": "SELECT count(*) FROM awa.jobs WHERE state = 'completed'",
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    async with awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS) as client:
        await client.migrate()


async def enqueue(args: Any) -> None:
    queues = c.queue_names(args.queues)
    per_queue = [[{"seq": i} for i in range(q, args.jobs, len(queues))] for q in range(len(queues))]
    async with awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS) as client:

        async def bulk() -> None:
            for name, batch in zip(queues, per_queue, strict=True):
                await client.insert_many(batch, kind="noop", queue=name)

        c.emit({"seconds": await c.timed(bulk)})


async def worker(args: Any) -> None:
    client = awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS)
    queues = c.queue_names(args.queues)

    @client.task(None, kind="noop", queue=queues[0])
    async def noop(job: awa.Job[Any]) -> None:
        c.record_start(job.args["seq"])

    async def start() -> None:
        if args.queues == 1:
            await client.start([("default", c.CONCURRENCY)])
        elif args.mode == "hard":
            await client.start([(name, c.CONCURRENCY // len(queues)) for name in queues])
        else:
            configs = [awa.QueueConfig(name) for name in queues]
            await client.start(configs, global_max_workers=c.CONCURRENCY)

    async def stop() -> None:
        await client.shutdown()
        await client.close()

    await c.serve_worker(args, start, stop)


async def produce(args: Any) -> None:
    async with awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS) as client:

        async def insert_one(seq: int) -> None:
            await client.insert({"seq": seq}, kind="noop")

        if args.command == "produce":
            await c.produce_steady(insert_one, args.rate, args.seconds)
        else:
            await c.insert_loop(insert_one, args.seconds)


def main() -> None:
    args = c.parse_args()
    commands = {"setup": setup, "enqueue": enqueue, "worker": worker}
    if args.command == "describe":
        describe(args)
        return
    coro = commands.get(args.command, produce)(args)
    if args.uvloop:
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


if __name__ == "__main__":
    main()
