"""The durability check (ADR 0017) knows the server's epoch before the first outcome.

A batch committed before the check's first poll used to be assumed to belong to the epoch
that poll read. When the server crashed in between, the poll read the epoch *after* the
crash, so outcomes the crash had lost were reported durable and their ``completed`` hooks
fired — and fired again when the rescued jobs ran a second time. A checkpoint between the
hand-over and the first poll, with the batches marked as committed before a restart,
stands in for the crash here (crash recovery ends with one, and a restart changes the
server's start time); tests/chaos/test_durable_hooks.py crashes a real server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

import awa
from awa.db import sql
from awa.db.rows import job_rows
from awa.types import Job, JobState
from awa.worker.durability import DurableOutcomes
from awa.worker.observe import Observer
from awa.worker.results import Finalization
from tests.helpers import wait_for


class _Reported(Observer):
    def __init__(self) -> None:
        self.durable: list[int] = []

    def needs_durable(self) -> bool:
        return True

    def outcomes_durable(self, durable: Sequence[Finalization]) -> None:
        self.durable.extend(f.job_id for f in durable)


def _before_a_restart(durable: DurableOutcomes) -> None:
    """Mark every waiting batch as committed under an earlier run of the server."""
    for waiting in durable._waiting:
        waiting.started = "a server run that crashed"


async def _claim(client: awa.AsyncClient, *, insert: bool = True) -> Job[Any]:
    if insert:
        await client.insert({}, kind="k", queue="q")
    pool = await client._get_pool()
    async with pool.connection() as conn:
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(
            sql.JOB_CLAIM_AVAILABLE,
            {
                "queue": "q",
                "limit": 1,
                "deadline_ms": 0,
                "synchronous_commit": "on",
                "instance": None,
                "held": None,
            },
        )
        (job,) = await cur.fetchall()
    return job


async def test_an_outcome_lost_before_the_first_poll_is_not_reported(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    # The claim is stored; the completion "was lost": the row is still running.
    job = await _claim(client)
    observer = _Reported()
    durable = DurableOutcomes(await client._get_pool(), observer)
    await durable.prime()
    durable.committed([Finalization(job, JobState.COMPLETED)])
    _before_a_restart(durable)
    db.execute("CHECKPOINT")  # the server's epoch moves on before the first poll
    await durable._check()
    assert observer.durable == [] and durable.waiting == 0  # looked up, found lost


async def test_a_stored_outcome_is_reported_after_a_checkpoint(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    job = await _claim(client)
    db.execute(
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
        [job.id],
    )
    observer = _Reported()
    durable = DurableOutcomes(await client._get_pool(), observer)
    await durable.prime()
    durable.committed([Finalization(job, JobState.COMPLETED)])
    _before_a_restart(durable)
    db.execute("CHECKPOINT")
    await durable._check()  # looked up, found stored: reported once the WAL is flushed

    async def reported() -> bool:
        await durable._check()
        return observer.durable == [job.id]

    await wait_for(reported)
    assert durable.waiting == 0


async def test_of_two_attempts_of_one_job_only_the_stored_one_is_reported(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    # The first attempt's claim and completion were lost in a crash (the row went back to
    # available); the job was claimed again and completed. Both outcomes wait for the same
    # lookup: before, every outcome of a job found stored was reported (hooks fired twice).
    lost = await _claim(client)
    db.execute(
        "UPDATE awa.jobs SET state = 'available', run_lease = 0, attempt = 0 WHERE id = %s",
        [lost.id],
    )
    rerun = await _claim(client, insert=False)
    assert (rerun.id, rerun.run_lease) == (lost.id, lost.run_lease)
    db.execute(
        "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
        [rerun.id],
    )
    observer = _Reported()
    durable = DurableOutcomes(await client._get_pool(), observer)
    await durable.prime()
    durable.committed([Finalization(lost, JobState.COMPLETED)])
    durable.committed([Finalization(rerun, JobState.COMPLETED)])
    _before_a_restart(durable)
    db.execute("CHECKPOINT")

    async def settled() -> bool:
        await durable._check()
        return durable.waiting == 0

    await wait_for(settled)
    assert observer.durable == [rerun.id]


async def test_a_routine_checkpoint_loses_nothing_whatever_became_of_the_row(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """No restart, only a checkpoint (as the server makes every few minutes): the outcome
    is reported, though its row has moved on since — here deleted, as a move to the dead
    letter queue or a retention prune leaves it — which a lookup would read as lost."""
    job = await _claim(client)
    db.execute("DELETE FROM awa.jobs WHERE id = %s", [job.id])
    observer = _Reported()
    durable = DurableOutcomes(await client._get_pool(), observer)
    await durable.prime()
    durable.committed([Finalization(job, JobState.FAILED)])
    db.execute("CHECKPOINT")

    async def reported() -> bool:
        await durable._check()
        return observer.durable == [job.id]

    await wait_for(reported)
