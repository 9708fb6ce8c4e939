"""Jobs a process cannot run are never failed by it (issue 20.1), and ``start()`` checks
its handlers and queues against each other (issues 20.1 and 20.4)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

import awa
from tests.helpers import FAST_WORKER, wait_for


@dataclasses.dataclass
class Known:
    n: int = 0


async def test_start_without_any_handler_is_a_build_error(client: awa.AsyncClient) -> None:
    job = await client.insert({"x": 1}, kind="somebody_elses", queue="q")
    with pytest.raises(awa.NoHandlersRegistered) as caught:
        await client.start([("q", 1)], **FAST_WORKER)
    assert isinstance(caught.value, awa.BuildError) and caught.value.field == "tasks"
    assert "@client.task" in str(caught.value)
    assert client._worker is None  # nothing started
    assert (await client.get_job(job.id)).state is awa.JobState.AVAILABLE


def test_sync_start_without_any_handler_is_a_build_error(sync_client: awa.Client) -> None:
    with pytest.raises(awa.NoHandlersRegistered):
        sync_client.start([("q", 1)])


async def test_unknown_kind_is_handed_back_without_spending_an_attempt(
    client: awa.AsyncClient, database_url: str
) -> None:
    @client.task(Known, queue="q")
    async def known(job: awa.Job[Known]) -> None:
        return None

    events: list[str] = []
    client.on_event("*", lambda event: events.append(event.name))
    stranger = await client.insert({"x": 1}, kind="added_in_the_next_release", queue="q")
    await client.start([("q", 2)], **FAST_WORKER)
    try:

        async def handed_back() -> awa.Job[Any] | None:
            job = await client.get_job(stranger.id)
            return job if job.metadata.get("unknown_kind") else None

        job: awa.Job[Any] = await wait_for(handed_back)
    finally:
        await client.shutdown()
    assert events == []  # no handler started, so no "started" (nor any other) event
    assert job.state is awa.JobState.SCHEDULED  # back in line, not failed
    assert job.attempt == 0 and job.finalized_at is None  # the attempt was refunded
    mark = job.metadata["unknown_kind"]
    assert mark["count"] == 1 and mark["pid"] > 0 and mark["host"]
    (error,) = job.errors
    assert error["type"] == "UnknownJobKind" and "added_in_the_next_release" in error["error"]
    assert job.run_at > job.created_at  # backed off, not spinning

    # A process that has the handler runs it later, with the full attempt budget.
    async with awa.AsyncClient(database_url) as upgraded:
        ran: list[int] = []

        @upgraded.task(None, kind="added_in_the_next_release", queue="q")
        async def new_kind(job: awa.Job[Any]) -> None:
            ran.append(job.attempt)

        await upgraded.retry(stranger.id)  # due now instead of after the backoff
        await upgraded.start([("q", 1)], **FAST_WORKER)
        try:

            async def completed() -> bool:
                done = await upgraded.get_job(stranger.id)
                return done.state is awa.JobState.COMPLETED

            await wait_for(completed)
        finally:
            await upgraded.shutdown()
    assert ran == [1]


async def test_repeated_hand_backs_count_and_back_off_further(client: awa.AsyncClient) -> None:
    @client.task(Known, queue="q")
    async def known(job: awa.Job[Known]) -> None:
        return None

    stranger = await client.insert({}, kind="nobody_here", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        runs: list[awa.Job[Any]] = []
        for count in (1, 2, 3):

            async def handed(count: int = count) -> awa.Job[Any] | None:
                job = await client.get_job(stranger.id)
                mark = job.metadata.get("unknown_kind") or {}
                return job if mark.get("count") == count else None

            runs.append(await wait_for(handed))
            await client.retry(stranger.id)
    finally:
        await client.shutdown()
    assert all(j.attempt == 0 and j.state is awa.JobState.SCHEDULED for j in runs)
    assert len(runs[-1].errors) == 1  # one entry, however often the job comes back
    backoffs = [j.metadata["unknown_kind"]["backoff_s"] for j in runs]
    assert backoffs == sorted(backoffs) and backoffs[0] < backoffs[-1]


async def test_start_warns_about_tasks_on_queues_it_does_not_serve(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    @client.task(Known, queue="email")
    async def send(job: awa.Job[Known]) -> None:
        return None

    @client.task(None, kind="report", queue="reports")
    async def report(job: awa.Job[Any]) -> None:
        return None

    with caplog.at_level(logging.WARNING, logger="awa"):
        await client.start([("emails", 1), ("reports", 1)], **FAST_WORKER)
        await client.shutdown()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    unserved = [m for m in warnings if "does not serve" in m]
    assert len(unserved) == 1, warnings
    assert "known" in unserved[0] and "'email'" in unserved[0]
    assert "report (queue" not in unserved[0]  # its queue is served
