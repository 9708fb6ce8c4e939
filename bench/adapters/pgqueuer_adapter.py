"""pgqueuer with asyncpg and uvloop, as its README and ``pgq run`` do.

Bulk: ``Queries.enqueue`` with lists (one unnest INSERT). Worker: ``QueueManager.run`` with
``max_concurrent_tasks=32`` and default batch_size 10, on one asyncpg connection (the
documented ``AsyncpgDriver(connection)``), under ``uvloop.run`` like the ``pgq`` CLI.
Finished jobs leave the queue table and are logged to ``pgqueuer_log``.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version
from typing import Any

import _common as c
import asyncpg
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

NOTES = [
    "Concurrency knob: QueueManager.run(max_concurrent_tasks=32); batch_size left at 10.",
    "At that cap, a dequeue that finds no free slot waits for the next notice or 100 ms "
    "(min_dequeue_poll_interval). How much that costs varied from run to run (in "
    "development runs on a busier machine the capped worker drained at a third of the "
    "uncapped rate), so pgqueuer's own default, unbounded in-flight jobs, is measured too "
    "as the reference row 'pgqueuer (no limit)'; it is not counted as a peer.",
    "Completion is read from pgqueuer_log (status 'successful'): pgqueuer deletes "
    "finished jobs from its queue table.",
    "W1×P: with 16 or 8 handlers per process the batch size is cut to half the cap (8, "
    "4): pgqueuer refuses a max_concurrent_tasks below twice its batch_size.",
]


def describe(args: Any) -> None:
    c.emit(
        {
            "system": "pgqueuer (no limit)" if args.unbounded else "pgqueuer",
            "version": version("pgqueuer"),
            "completed_sql": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
            "notes": NOTES,
        }
    )


async def setup(args: Any) -> None:
    conn = await asyncpg.connect(args.url)
    await Queries(AsyncpgDriver(conn)).install()
    await conn.close()


async def enqueue(args: Any) -> None:
    conn = await asyncpg.connect(args.url)
    queries = Queries(AsyncpgDriver(conn))
    payloads: list[bytes | None] = [str(i).encode() for i in range(args.jobs)]

    async def bulk() -> None:
        await queries.enqueue(["noop"] * args.jobs, payloads, [0] * args.jobs)

    c.emit(await c.timed(bulk))
    await conn.close()


async def worker(args: Any) -> None:
    conn = await asyncpg.connect(args.url)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        seq = int(job.payload or b"0")
        c.record_start(seq)
        if c.has_body():
            await c.job_body(seq)

    running: list[asyncio.Task[None]] = []

    async def start() -> None:
        limit = None if args.unbounded else args.concurrency
        # pgqueuer refuses a cap below twice the batch size (W1×P splits 32 into 16 or 8)
        batch = 10 if limit is None else min(10, limit // 2)
        running.append(
            asyncio.create_task(pgq.qm.run(batch_size=batch, max_concurrent_tasks=limit))
        )

    async def stop() -> None:
        pgq.qm.shutdown.set()
        await asyncio.wait_for(running[0], 30)

    await c.serve_worker(args, start, stop)


async def produce(args: Any) -> None:
    conn = await asyncpg.connect(args.url)
    queries = Queries(AsyncpgDriver(conn))

    async def insert_one(seq: int) -> None:
        await queries.enqueue("noop", str(seq).encode())

    if args.command == "produce":
        await c.produce_steady(insert_one, args.rate, args.seconds)
    else:
        await c.insert_loop(insert_one, args.seconds)
    await conn.close()


def main() -> None:
    args = c.parse_args()
    if args.command == "describe":
        describe(args)
        return
    commands = {"setup": setup, "enqueue": enqueue, "worker": worker}
    uvloop.run(commands.get(args.command, produce)(args))


if __name__ == "__main__":
    main()
