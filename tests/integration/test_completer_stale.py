"""The completer tells a stale outcome from the current one of the same job in one write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import awa
from awa.types import Job, JobState
from awa.worker.completer import Completer
from awa.worker.observe import Observer
from awa.worker.results import Finalization


class _Seen(Observer):
    def __init__(self) -> None:
        self.applied: list[tuple[int, int, JobState]] = []
        self.stale: list[tuple[int, int, JobState]] = []

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        self.applied += [(f.job_id, f.run_lease, f.state) for f in applied]

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        self.stale += [(f.job_id, f.run_lease, f.state) for f in stale]


async def test_a_stale_outcome_written_beside_its_jobs_next_attempt_is_not_applied(
    client: awa.AsyncClient,
) -> None:
    """The write names the jobs it applied, not the attempts: the stale outcome of an
    attempt that lost its lease was counted, hooked and logged as applied beside the
    next attempt's (a review: a completed hook fired for a job only retried)."""
    inserted = await client.insert({}, kind="j", queue="q")
    pool = await client._get_pool()

    async def attempt(lease: int) -> Job[Any]:
        async with pool.connection() as conn:  # test-only: the row as a claim leaves it
            await conn.execute(
                "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = %s, "
                "attempted_at = clock_timestamp(), heartbeat_at = now() WHERE id = %s",
                (lease, inserted.id),
            )
        return await client.get_job(inserted.id)

    first = await attempt(1)
    second = await attempt(2)  # the first lost its lease: the job runs again
    seen = _Seen()
    completer = Completer(pool, observer=seen, synchronous_commit=True)
    await completer.submit(Finalization(first, JobState.COMPLETED))
    retry = {"error": "boom", "type": "RuntimeError", "attempt": 1}
    await completer.submit(Finalization(second, JobState.RETRYABLE, delay_ms=60_000, error=retry))
    completer.start()  # both in its first write
    await completer.drain()
    await completer.stop()
    assert seen.applied == [(inserted.id, 2, JobState.RETRYABLE)]
    assert seen.stale == [(inserted.id, 1, JobState.COMPLETED)]
    assert (completer.applied, completer.stale, completer.flushes) == (1, 1, 1)
    assert (await client.get_job(inserted.id)).state is JobState.RETRYABLE


async def test_an_outcome_the_database_refuses_is_dropped_not_reported_stale(
    client: awa.AsyncClient,
) -> None:
    """Written one by one after its batch was refused, an outcome refused on its own was
    reported as a lost lease (log, counter, span), the row still running under it (a
    review)."""
    inserted = await client.insert({}, kind="j", queue="q")
    pool = await client._get_pool()
    async with pool.connection() as conn:  # test-only: a claim, and a rule refusing the outcome
        await conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
            "attempted_at = clock_timestamp(), heartbeat_at = now() WHERE id = %s",
            (inserted.id,),
        )
        await conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE check_violation USING MESSAGE = 'refused'; END $$;"
            "CREATE TRIGGER refuse BEFORE UPDATE ON awa.jobs FOR EACH ROW "
            "WHEN (NEW.state = 'completed') EXECUTE FUNCTION refuse()"
        )
    job = await client.get_job(inserted.id)
    seen = _Seen()
    completer = Completer(pool, observer=seen, synchronous_commit=True)
    await completer.submit(Finalization(job, JobState.COMPLETED))
    completer.start()
    await completer.drain()
    await completer.stop()
    assert seen.applied == [] and (completer.stale, completer.dropped) == (0, 1)
    assert [(job_id, state) for job_id, _, state in seen.stale] == [
        (inserted.id, JobState.COMPLETED)  # told, marked dropped: its span ends
    ]
    assert (await client.get_job(inserted.id)).state is JobState.RUNNING
