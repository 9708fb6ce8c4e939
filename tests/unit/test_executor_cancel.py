"""Stopping an attempt (Executor.cancel): only the attempt named, and never by cancelling a
task that has not started (its clean-up would never run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from awa.types import Job, JobState
from awa.worker.executor import Executor
from awa.worker.registry import TaskRegistry
from tests.helpers import wait_for
from tests.unit.fakes import FakeCompleter, FakePermit


def _job(attempted_at: datetime) -> Job[Any]:
    return Job(
        id=618, kind="k", queue="q", args={}, state=JobState.RUNNING, priority=2, attempt=1,
        max_attempts=25, run_lease=1, tags=[], metadata={}, progress=None, errors=[],
        created_at=attempted_at, run_at=attempted_at, attempted_at=attempted_at,
        deadline_at=None, finalized_at=None,
    )  # fmt: skip


def _executor(ran: list[int]) -> tuple[Executor, FakeCompleter]:
    registry = TaskRegistry()

    async def handler(job: Job[Any]) -> None:
        ran.append(job.id)

    registry.register(None, handler, kind="k", queue="q")
    completer = FakeCompleter()
    return Executor(registry, completer, threads=1), completer  # type: ignore[arg-type]


async def test_an_attempt_stopped_before_its_task_starts_still_ends_and_frees_its_permit() -> None:
    ran: list[int] = []
    executor, completer = _executor(ran)
    permit = FakePermit()
    executor.launch(_job(datetime.now(UTC)), permit, deadline_ms=0)  # type: ignore[arg-type]
    assert executor.cancel(618, "cancelled", 1)  # in the same loop pass as the launch

    async def ended() -> bool:
        return permit.released == 1

    await wait_for(ended)
    assert executor.in_flight() == []  # no longer heartbeated
    assert ran == [] and completer.outcomes == []  # the handler never started


async def test_a_stale_attempts_key_never_stops_the_attempt_that_replaced_it() -> None:
    """A crash forgot a claim; the job was claimed again under the same run_lease (ADR
    0006). A heartbeat whose list predates the new claim reports the old key gone."""
    ran: list[int] = []
    executor, _ = _executor(ran)
    first = datetime.now(UTC)
    executor.launch(_job(first + timedelta(seconds=1)), FakePermit(), deadline_ms=0)  # type: ignore[arg-type]
    assert not executor.cancel(618, "lease lost", key=(618, 1, first))

    async def the_new_attempt_ran() -> bool:
        return ran == [618]

    await wait_for(the_new_attempt_ran)
