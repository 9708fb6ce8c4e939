"""Progress, checkpoints and metadata updates on real PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import threading
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, wait_for


def _row(db: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT state::text, progress, metadata FROM awa.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


async def test_progress_survives_a_retry_and_the_handler_resumes_from_its_checkpoint(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    seen: list[Any] = []

    @client.task(None, kind="batch", queue="q")
    async def batch(job: awa.Job[Any]) -> awa.RetryAfter | None:
        seen.append((job.attempt, job.checkpoint, dict(job.metadata)))
        start = (job.checkpoint or {}).get("next", 0)
        for i in range(start, 10):
            if i == 5 and job.attempt == 1:
                raise RuntimeError("crashed half way")
            job.set_progress(i * 10, f"item {i}", checkpoint={"next": i + 1})
            job.update_metadata({"last_item": i})
        return None

    job = await client.insert({}, kind="batch", queue="q", metadata={"owner": "ops"})
    await client.start([("q", 1)], **FAST_WORKER)
    try:

        async def retryable() -> bool:
            return _row(db, job.id)[0] == "retryable"

        await wait_for(retryable)
        _, progress, metadata = _row(db, job.id)
        assert progress == {"percent": 40.0, "message": "item 4", "checkpoint": {"next": 5}}
        assert metadata == {"owner": "ops", "last_item": 4}
        await client.retry(job.id)  # run it now instead of after the backoff

        async def completed() -> bool:
            return _row(db, job.id)[0] == "completed"

        await wait_for(completed)
    finally:
        await client.shutdown()
    assert seen[1] == (2, {"next": 5}, {"owner": "ops", "last_item": 4})
    _, progress, metadata = _row(db, job.id)
    assert progress is None  # cleared on completion
    assert metadata == {"owner": "ops", "last_item": 9}


async def test_progress_is_written_with_heartbeats_and_by_flush(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    gate = asyncio.Event()
    flushed: list[bool] = []
    sync_gate = threading.Event()

    @client.task(None, kind="slow", queue="q")
    async def slow(job: awa.Job[Any]) -> None:
        job.set_progress(25, "a quarter")
        await gate.wait()
        job.set_progress(75)
        flushed.append(await job.flush_progress())
        await asyncio.Event().wait()

    @client.task(None, kind="slow_sync", queue="q")
    def slow_sync(job: awa.Job[Any]) -> None:
        job.update_metadata({"phase": "download"})
        flushed.append(job.flush_progress_sync())
        sync_gate.wait(15)

    job = await client.insert({}, kind="slow", queue="q")
    sync_job = await client.insert({}, kind="slow_sync", queue="q")
    await client.start([("q", 2)], **{**FAST_WORKER, "heartbeat_interval_ms": 100})
    try:

        async def beat_wrote() -> bool:
            return _row(db, job.id)[1] == {"percent": 25.0, "message": "a quarter"}

        await wait_for(beat_wrote)  # written by the heartbeat-cadence flush, no call needed
        gate.set()

        async def flush_wrote() -> bool:
            return _row(db, job.id)[1] == {"percent": 75.0}

        await wait_for(flush_wrote)

        async def sync_wrote() -> bool:
            return _row(db, sync_job.id)[2] == {"phase": "download"}

        await wait_for(sync_wrote)
        assert _row(db, job.id)[0] == "running"
    finally:
        sync_gate.set()
        await client.cancel(job.id)
        await client.shutdown()
    assert flushed == [True, True] or flushed == [True, True][::-1]


async def test_progress_validation(client: awa.AsyncClient) -> None:
    errors: list[str] = []

    @client.task(None, kind="v", queue="q")
    async def v(job: awa.Job[Any]) -> None:
        for call in (
            lambda: job.set_progress(float("nan")),
            lambda: job.set_progress(True),
            lambda: job.update_metadata(["not", "a", "dict"]),  # type: ignore[arg-type]
            lambda: job.set_progress(1, checkpoint=object()),
        ):
            try:
                call()
            except awa.AwaError as exc:
                errors.append(type(exc).__name__)

    job = await client.insert({}, kind="v", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:

        async def done() -> bool:
            return (await client.get_job(job.id)).state is awa.JobState.COMPLETED

        await wait_for(done)
    finally:
        await client.shutdown()
    assert errors == ["ValidationError"] * 3 + ["SerializationError"]
    outside = await client.get_job(job.id)
    with pytest.raises(RuntimeError, match="inside a handler"):
        outside.set_progress(10)


async def test_progress_out_of_range_is_clamped_not_an_error(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    written: list[Any] = []

    @client.task(None, kind="eager", queue="q")
    async def eager(job: awa.Job[Any]) -> None:
        for percent, message in ((-5, "below"), (101, "above"), (float("inf"), "infinite")):
            job.set_progress(percent, message)
            assert await job.flush_progress()
            written.append(_row(db, job.id)[1])

    job = await client.insert({}, kind="eager", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    try:

        async def done() -> awa.Job[Any] | None:
            current = await client.get_job(job.id)
            return current if current.state.is_final else None

        final: awa.Job[Any] = await wait_for(done)
    finally:
        await client.shutdown()
    assert final.state is awa.JobState.COMPLETED and final.attempt == 1  # no attempt lost
    assert written == [
        {"percent": 0.0, "message": "below"},
        {"percent": 100.0, "message": "above"},
        {"percent": 100.0, "message": "infinite"},
    ]


async def test_a_shutdown_keeps_what_unfinished_handlers_recorded(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Handlers still running at shutdown are fenced back to retryable with the progress
    and checkpoint they recorded since the last heartbeat (none ran here: heartbeats are
    minutes apart), so the next attempt resumes from it."""
    recorded = threading.Event()
    async_recorded = asyncio.Event()
    release = threading.Event()

    @client.task(None, kind="slow_async", queue="q")
    async def slow_async(job: awa.Job[Any]) -> None:
        job.set_progress(30, "async", checkpoint={"row": 5})
        async_recorded.set()
        await asyncio.Event().wait()

    @client.task(None, kind="slow_sync", queue="q")
    def slow_sync(job: awa.Job[Any]) -> None:
        job.set_progress(20, "sync", checkpoint={"row": 2})
        recorded.set()
        release.wait(30)

    jobs = [await client.insert({}, kind=kind, queue="q") for kind in ("slow_async", "slow_sync")]
    await client.start([("q", 2)], heartbeat_interval_ms=600_000, heartbeat_staleness_ms=900_000)
    try:
        await asyncio.wait_for(async_recorded.wait(), 10)
        assert await asyncio.to_thread(recorded.wait, 10)
        await client.shutdown(timeout_ms=100)
    finally:
        release.set()
    rows = [_row(db, job.id) for job in jobs]
    assert [state for state, _, _ in rows] == ["retryable", "retryable"]
    assert rows[0][1] == {"percent": 30.0, "message": "async", "checkpoint": {"row": 5}}
    assert rows[1][1] == {"percent": 20.0, "message": "sync", "checkpoint": {"row": 2}}


@dataclasses.dataclass
class Page:
    number: int


class Colour(enum.Enum):
    RED = "red"


async def test_what_is_written_is_the_value_at_the_call(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A checkpoint or metadata value only awa's encoder knows (a dataclass, an enum), or
    one the handler changes after the call into something unstorable, is written as it
    was at the call: it once failed the write of every outcome of the worker, for good."""
    flushed: list[bool] = []

    @client.task(None, kind="resumable", queue="q")
    async def resumable(job: awa.Job[Any]) -> None:
        checkpoint = {"page": Page(3), "seen": [1]}
        job.set_progress(50, checkpoint=checkpoint)
        checkpoint["seen"].append(float("nan"))  # after the call: not what is stored
        patch = {"colour": Colour.RED, "pages": [1]}
        job.update_metadata(patch)
        patch["pages"].append(float("nan"))
        flushed.append(await job.flush_progress())
        # A call keeping the checkpoint keeps the one stored, not the object as it is now
        # (it re-read the handler's object: a NaN put in it later failed this call).
        job.set_progress(60, "more")
        flushed.append(await job.flush_progress())
        raise RuntimeError("try again later")

    job = await client.insert({}, kind="resumable", queue="q", max_attempts=2)
    await client.start([("q", 1)], **FAST_WORKER)
    try:

        async def retryable() -> bool:
            return _row(db, job.id)[0] == "retryable"

        await wait_for(retryable)
    finally:
        await client.shutdown()
    _, progress, metadata = _row(db, job.id)
    assert flushed == [True, True]
    assert progress == {
        "percent": 60.0,
        "message": "more",
        "checkpoint": {"page": {"number": 3}, "seen": [1]},
    }
    assert metadata == {"colour": "red", "pages": [1]}
