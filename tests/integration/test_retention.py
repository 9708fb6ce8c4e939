"""The retention pruner deletes only what is past its retention when it takes the row."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
from awa.db import sql
from awa.maintenance import pruner
from tests.helpers import lead_maintenance, statements_running, wait_for

DAY_MS = 86_400_000


async def test_a_job_retried_while_the_prune_waits_for_it_is_kept(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The prune read its ids, then waited for the row an operator's retry held; the
    retry committed and the prune deleted the job, now available (a review)."""
    job = await client.insert({}, kind="k", queue="q", max_attempts=1)
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', attempt = 1, "
        "finalized_at = now() - interval '30 days' WHERE id = %s",
        (job.id,),
    )
    epoch = lead_maintenance(db)
    pool = await client._get_pool()
    with psycopg.connect(database_url) as operator:  # a retry under way, not committed
        operator.execute(sql.JOB_RETRY, {"id": job.id}).fetchall()
        prune = asyncio.ensure_future(pruner.prune_finalized(pool, DAY_MS, 7 * DAY_MS, epoch))
        await wait_for(lambda: statements_running(db, "-- job_prune_finalized", on_a_lock=True))
        operator.commit()
    assert await prune == 0
    kept = await client.get_job(job.id)
    assert kept.state is awa.JobState.AVAILABLE
