"""awa-pg, the seed system (Rust core, Python handlers through PyO3). Its import name is
``awa`` too, which is why it lives in its own virtualenv.

Setup runs ``migrate()`` then ``install_queue_storage()``: a fresh 0.6.9 migrate leaves the
cluster on the older canonical engine, while its README names queue storage with
``enqueue_many_copy`` as the path for high-volume producers. Worker:
``start([("default", 32)])``, other settings default.
"""

from __future__ import annotations

import asyncio
import dataclasses
from importlib.metadata import version
from typing import Any

import _common as c

import awa

MAX_CONNECTIONS = 10  # awa-pg's AsyncClient default

# Queue storage records successes as receipt batches; failures and retries as done entries.
COMPLETED_SQL = (
    "SELECT (SELECT coalesce(sum(completed_count), 0) FROM awa.receipt_completion_batches)"
    " + (SELECT count(*) FROM awa.done_entries WHERE state = 'completed')"
)

NOTES = [
    "Queue-storage engine installed explicitly (install_queue_storage()) and bulk via "
    "enqueue_many_copy: a fresh migrate stays on the canonical engine, whose "
    "insert_many_copy is ~8x slower on bulk and ~25% slower on W1 here.",
    "Completion is read from awa.receipt_completion_batches (+ done_entries): counting "
    "the awa.jobs compatibility view in queue-storage mode takes minutes.",
]


@dataclasses.dataclass
class Noop:
    seq: int


def describe(args: Any) -> None:
    c.emit(
        {
            "system": "awa-pg",
            "version": version("awa-pg"),
            "completed_sql": COMPLETED_SQL,
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    client = awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS)
    await client.migrate()
    await client.install_queue_storage()
    await client.close()


async def enqueue(args: Any) -> None:
    client = awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS)
    jobs = [{"seq": i} for i in range(args.jobs)]

    async def bulk() -> None:
        await client.enqueue_many_copy(jobs, kind="noop")

    c.emit(await c.timed(bulk))
    await client.close()


async def worker(args: Any) -> None:
    client = awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS)

    @client.task(Noop, kind="noop")
    async def noop(job: Any) -> None:
        seq = job.args.seq
        c.record_start(seq)
        if c.has_body():
            await c.job_body(seq)

    async def start() -> None:
        await client.start([("default", args.concurrency)])

    async def stop() -> None:
        await client.shutdown()
        await client.close()

    await c.serve_worker(args, start, stop)


async def produce(args: Any) -> None:
    client = awa.AsyncClient(args.url, max_connections=MAX_CONNECTIONS)

    async def insert_one(seq: int) -> None:
        await client.insert(Noop(seq), kind="noop")

    if args.command == "produce":
        await c.produce_steady(insert_one, args.rate, args.seconds)
    else:
        await c.insert_loop(insert_one, args.seconds)
    await client.close()


def main() -> None:
    args = c.parse_args()
    if args.command == "describe":
        describe(args)
        return
    commands = {"setup": setup, "enqueue": enqueue, "worker": worker}
    asyncio.run(commands.get(args.command, produce)(args))


if __name__ == "__main__":
    main()
