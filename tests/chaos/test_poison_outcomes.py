"""Outcomes PostgreSQL refuses must not wedge a worker.

Outcomes are written in batches, and a failed flush is retried until it succeeds. Before
these tests, one handler raising an exception whose message held a NUL character made
every flush of its batch fail forever: no other outcome of that worker was written
again, and shutdown waited for them without end.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import awa
from awa.db import sql
from awa.db.rows import job_rows
from awa.types import JobState
from awa.worker.completer import Completer
from awa.worker.results import Finalization
from tests.helpers import FAST_WORKER, wait_for

pytestmark = pytest.mark.chaos


async def test_unstorable_exception_messages_are_recorded_and_do_not_block_others(
    client: awa.AsyncClient,
) -> None:
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> awa.Cancel | None:
        if job.args["how"] == "nul":
            raise ValueError("bad\x00byte")
        if job.args["how"] == "surrogate":
            raise ValueError("name " + b"\xff".decode("utf-8", "surrogateescape"))
        if job.args["how"] == "cancel":
            return awa.Cancel("reason\x00with a NUL")
        return None

    await client.start([("q", 4)], **FAST_WORKER)
    try:
        ids = {}
        for how in ("nul", "surrogate", "cancel", "fine"):
            job = await client.insert({"how": how}, kind="k", queue="q", max_attempts=1)
            ids[how] = job.id
        others = await client.insert_many([{"how": "fine"} for _ in range(20)], kind="k",
                                          queue="q")  # fmt: skip

        async def all_final() -> bool:
            jobs = [await client.get_job(i) for i in [*ids.values(), *(j.id for j in others)]]
            return all(j.state.is_final for j in jobs)

        await wait_for(all_final, timeout=30)
    finally:
        await client.shutdown()  # used to hang: the poisoned batch was never written
    nul = await client.get_job(ids["nul"])
    assert nul.state is JobState.FAILED and nul.errors[0]["error"] == "bad\ufffdbyte"
    surrogate = await client.get_job(ids["surrogate"])
    assert surrogate.state is JobState.FAILED and surrogate.errors[0]["error"] == "name \ufffd"
    cancelled = await client.get_job(ids["cancel"])
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.errors[0]["error"] == "reason\ufffdwith a NUL"
    assert (await client.get_job(ids["fine"])).state is JobState.COMPLETED


async def test_an_outcome_refused_by_the_database_is_dropped_alone(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Defence in depth: whatever else the server may refuse in an outcome (here a delay
    past the end of PostgreSQL's calendar, written around the validation), the rest of
    the batch is written, and the refused job is left to the rescuer."""
    await client.insert_many([{} for _ in range(5)], kind="k", queue="q")
    pool = await client._get_pool()
    async with pool.connection() as conn:
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(
            sql.JOB_CLAIM_AVAILABLE,
            {
                "queue": "q",
                "limit": 5,
                "deadline_ms": 0,
                "synchronous_commit": "on",
                "instance": None,
                "held": None,
            },
        )
        jobs = await cur.fetchall()
    poison, *fine = jobs
    completer = Completer(pool)
    completer.start()
    try:
        await completer.submit(Finalization(poison, JobState.RETRYABLE, delay_ms=1e300))
        for job in fine:
            await completer.submit(Finalization(job, JobState.COMPLETED))
        await completer.drain()
    finally:
        await completer.stop()
    assert completer.applied == len(fine) and completer.stale == 0 and completer.dropped == 1
    states = dict(db.execute("SELECT id, state::text FROM awa.jobs").fetchall())
    assert states == {poison.id: "running", **{job.id: "completed" for job in fine}}


async def test_an_outcome_refused_by_the_unique_index_does_not_block_others(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Rows written before unique states were checked (or by hand) may hold a key that
    their completion cannot take: the completer drops that outcome, not every later one."""

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    holder = await client.insert({"n": 0}, kind="k", queue="q")
    stuck = await client.insert({"n": 1}, kind="k", queue="q")
    # Both share a key guarded only once completed; the holder is completed already.
    db.execute(
        "UPDATE awa.jobs SET unique_key = '\\x01'::bytea, unique_states = B'00010000' "
        "WHERE id = ANY(%s)",
        ([holder.id, stuck.id],),
    )
    db.execute("UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
               (holder.id,))  # fmt: skip
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        later = await client.insert({"n": 2}, kind="k", queue="q")

        async def later_completed() -> bool:
            return (await client.get_job(later.id)).state is JobState.COMPLETED

        await wait_for(later_completed)
    finally:
        await client.shutdown()
