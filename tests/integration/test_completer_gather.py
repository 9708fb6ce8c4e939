"""Under load the completer gathers outcomes into fewer writes (ADR 0044), except when a
claim rides on the next write, and never at a trickle.

The first write is held on a row lock while a second outcome arrives, so outcomes wait
when that write returns; a third arrives just after. Counted as load (``gather_after``
lowered to one outcome), the second and third share one write; when a dispatcher's next
claim rides on the write, or the first write was too small to count as load, the second
is written at once and the third on its own.
"""

from __future__ import annotations

from typing import Any

import psycopg

import awa
from awa.db import sql
from awa.db.rows import FleetHold, job_rows
from awa.types import Job, JobState
from awa.worker.claiming import Reservation
from awa.worker.completer import Completer
from awa.worker.results import Finalization
from tests.helpers import wait_for


async def _claimed(client: awa.AsyncClient, count: int) -> list[Job[Any]]:
    await client.insert_many([{} for _ in range(count)], kind="k", queue="q")
    pool = await client._get_pool()
    async with pool.connection() as conn:
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(
            sql.JOB_CLAIM_AVAILABLE,
            {"queue": "q", "limit": count, "deadline_ms": 0, "synchronous_commit": "off",
             "instance": None, "held": None},
        )  # fmt: skip
        return await cur.fetchall()


class _RidingNext:
    """A dispatcher whose next claim rides on the completer's next write."""

    def ride(self) -> Reservation | None:
        return None  # nothing to claim at this instant

    def rode(
        self, reservation: Reservation, jobs: list[Job[Any]], hold: FleetHold | None,
        sizes: list[int],
    ) -> None:  # fmt: skip
        raise AssertionError("no claim was reserved")

    def ride_failed(self, reservation: Reservation) -> None:
        raise AssertionError("no claim was reserved")

    def rides_next(self) -> bool:
        return True


async def _three_outcomes(client: awa.AsyncClient, url: str, completer: Completer) -> None:
    first, second, third = await _claimed(client, 3)
    completer.start()
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", [first.id])
        await completer.submit(Finalization(first, JobState.COMPLETED))

        async def writing() -> bool:
            return completer.backlog == 1 and not completer.write_pending()

        await wait_for(writing)  # the first write is under way (and waits for the lock)
        await completer.submit(Finalization(second, JobState.COMPLETED))
        holder.rollback()  # the first write goes through, the second outcome is pending

    async def first_written() -> bool:
        return completer.flushes >= 1

    await wait_for(first_written)
    await completer.submit(Finalization(third, JobState.COMPLETED))
    await completer.drain()
    await completer.stop()
    assert completer.applied == 3


async def test_outcomes_arriving_under_load_share_a_write(
    client: awa.AsyncClient, database_url: str
) -> None:
    completer = Completer(await client._get_pool())
    completer.gather_s = 0.5  # wide enough that the third outcome always arrives inside it
    completer.gather_after = 1
    await _three_outcomes(client, database_url, completer)
    assert completer.flushes == 2


async def test_a_trickle_does_not_wait(client: awa.AsyncClient, database_url: str) -> None:
    completer = Completer(await client._get_pool())
    completer.gather_s = 0.5
    assert completer.gather_after > 1  # a write of one outcome is not load
    await _three_outcomes(client, database_url, completer)
    assert completer.flushes == 3


async def test_a_write_a_claim_rides_on_does_not_wait(
    client: awa.AsyncClient, database_url: str
) -> None:
    completer = Completer(await client._get_pool())
    completer.gather_s = 0.5
    completer.gather_after = 1
    completer.ride_with([_RidingNext()])
    await _three_outcomes(client, database_url, completer)
    assert completer.flushes == 3
