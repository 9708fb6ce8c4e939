"""awa (this repository), through its public API only. Runs in the project's .venv, or in
bench/.venvs/awa-uvloop with ``--uvloop``.

Fastest path: ``insert_many`` (COPY) for bulk, ``insert`` for single jobs, one async no-op
handler, ``start([("default", 32)])``. W4 runs 4 queues hard-reserved at 8 each, or weighted
with ``global_max_workers=32`` and default ``QueueConfig`` (min_workers 0, weight 1).
``--durable`` starts the worker with ``synchronous_commit=True`` (W1-durable); ``--cap N``
sets a fleet-wide concurrency limit on the queue at setup (W6; needs ``set_queue_limits``);
``idle`` starts a worker on ``--queues`` empty queues (the idle workload).
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


def system_name(args: Any) -> str:
    if args.uvloop:
        return "awa (uvloop)"
    return "awa (durable)" if args.durable else "awa"


def describe(args: Any) -> None:
    c.emit(
        {
            "system": system_name(args),
            "version": awa.__version__,
            "completed_sql": "SELECT count(*) FROM awa.jobs WHERE state = 'completed'",
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    async with awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS) as client:
        await client.migrate()
        if args.cap:
            set_limits = getattr(client, "set_queue_limits", None)
            if set_limits is None:
                c.emit({"skipped": "AsyncClient.set_queue_limits (CONTRACT §8) is not there yet"})
                return
            await set_limits("default", concurrency=args.cap)
        c.emit({"ok": True})


async def enqueue(args: Any) -> None:
    queues = c.queue_names(args.queues)
    per_queue = [[{"seq": i} for i in range(q, args.jobs, len(queues))] for q in range(len(queues))]
    async with awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS) as client:

        async def bulk() -> None:
            for name, batch in zip(queues, per_queue, strict=True):
                await client.insert_many(batch, kind="noop", queue=name)

        c.emit(await c.timed(bulk))


async def worker(args: Any) -> None:
    client = awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS)
    queues = c.queue_names(args.queues)

    @client.task(None, kind="noop", queue=queues[0])
    async def noop(job: awa.Job[Any]) -> None:
        seq = job.args["seq"]
        c.record_start(seq)
        if c.has_body():
            await c.job_body(seq)

    settings = {"synchronous_commit": True} if args.durable else {}

    async def start() -> None:
        if args.queues == 1:
            await client.start([("default", args.concurrency)], **settings)
        elif args.mode == "hard" or args.command == "idle":
            per_queue = max(1, args.concurrency // len(queues))
            await client.start([(name, per_queue) for name in queues], **settings)
        else:
            configs = [awa.QueueConfig(name) for name in queues]
            await client.start(configs, global_max_workers=args.concurrency, **settings)

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
    commands = {"setup": setup, "enqueue": enqueue, "worker": worker, "idle": worker}
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
