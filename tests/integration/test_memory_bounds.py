"""What a job can make a worker hold (issue 18.6): metadata and progress are bounded at the
handler's call, stored error messages are cut and only the last 20 kept, and the args of
running jobs stay within the process's ``max_args_bytes_in_flight``."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import psycopg
import pytest

import awa
from awa.serialization import MAX_METADATA_BYTES
from awa.worker.results import MAX_ERROR_CHARS
from tests.helpers import FAST_WORKER, lead_maintenance, wait_for

KEPT = 20


async def _state(client: awa.AsyncClient, job_id: int, *states: str) -> awa.Job[Any]:
    async def reached() -> awa.Job[Any] | None:
        job = await client.get_job(job_id)
        return job if job.state.value in states else None

    found: awa.Job[Any] = await wait_for(reached)
    return found


async def test_update_metadata_and_progress_refuse_more_than_the_limit(
    client: awa.AsyncClient,
) -> None:
    refused: list[str] = []

    @client.task(None, kind="grow", queue="q")
    def grow(job: awa.Job[Any]) -> None:  # a thread: encoding never blocks the loop
        half = "x" * (MAX_METADATA_BYTES // 2)
        job.update_metadata({"a": half})  # fits
        for call in (
            lambda: job.update_metadata({"b": half}),  # fits alone, not with "a"
            lambda: job.update_metadata({"c": "x" * (MAX_METADATA_BYTES + 1)}),
            lambda: job.set_progress(50, checkpoint="x" * (MAX_METADATA_BYTES + 1)),
        ):
            try:
                call()
            except awa.ValidationError as exc:
                refused.append(exc.field)

    job = await client.insert({}, kind="grow", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    done = await _state(client, job.id, "completed")
    assert refused == ["metadata", "metadata", "progress"]
    assert set(done.metadata) == {"a"}


async def test_a_huge_error_message_is_cut_and_marked(client: awa.AsyncClient) -> None:
    @client.task(None, kind="shout", queue="q")
    async def shout(job: awa.Job[Any]) -> None:
        raise awa.TerminalError("x" * 30_000_000)

    job = await client.insert({}, kind="shout", queue="q")
    await client.start([("q", 1)], **FAST_WORKER)
    failed = await _state(client, job.id, "failed")
    [entry] = failed.errors
    assert entry["error"].startswith("x" * MAX_ERROR_CHARS)
    assert entry["error"].endswith(f"… [cut: {30_000_000 - MAX_ERROR_CHARS} more characters]")
    assert len(entry["traceback"]) < 2 * MAX_ERROR_CHARS
    assert "raise awa.TerminalError" in entry["traceback"]  # the frames, not the message


def _seed_errors(db: psycopg.Connection[Any], job_id: int, n: int) -> None:
    db.execute(
        "UPDATE awa.jobs SET errors = (SELECT jsonb_agg(jsonb_build_object('error', "
        "'old ' || i, 'attempt', i) ORDER BY i) FROM generate_series(1, %s) AS i), "
        "attempt = %s, max_attempts = 1000 WHERE id = %s",
        (n, n, job_id),
    )


async def test_a_job_keeps_its_last_20_errors(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Through the worker's outcome (finalize), a rescue and an operator's cancel."""

    @client.task(None, kind="fail", queue="q")
    async def fail(job: awa.Job[Any]) -> None:
        raise RuntimeError(f"failure {job.attempt}")

    failing = await client.insert({}, kind="fail", queue="q")
    _seed_errors(db, failing.id, 25)
    await client.start([("q", 1)], **FAST_WORKER)
    retried = await _state(client, failing.id, "retryable")
    await client.shutdown()
    assert len(retried.errors) == KEPT
    assert [e["error"] for e in retried.errors[:-1]] == [f"old {i}" for i in range(7, 26)]
    assert retried.errors[-1]["error"] == "failure 26"

    stuck = await client.insert({}, kind="other", queue="nobody")
    _seed_errors(db, stuck.id, 30)
    db.execute(
        "UPDATE awa.jobs SET state = 'running', heartbeat_at = now() - interval '1 hour', "
        "attempted_at = now() WHERE id = %s",
        (stuck.id,),
    )
    from awa.maintenance import rescuer

    pool = await client._get_pool()
    assert await rescuer.rescue_stale_heartbeats(pool, 1_000, lead_maintenance(db))
    rescued = await client.get_job(stuck.id)
    assert len(rescued.errors) == KEPT and rescued.errors[-1]["type"] == "HeartbeatStale"
    assert rescued.errors[0]["error"] == "old 12"

    cancelled = await client.cancel(stuck.id)
    assert len(cancelled.errors) == KEPT and cancelled.errors[0]["error"] == "old 13"


async def test_args_in_flight_stay_within_the_budget(client: awa.AsyncClient) -> None:
    """Jobs of 256 KiB args, 50 permits, a 1 MiB budget: at most 4 run at once (judged
    from the handlers' own start and end times), and every job runs."""
    spans: list[tuple[float, float]] = []

    @client.task(None, kind="big", queue="q")
    async def big(job: awa.Job[Any]) -> None:
        start = time.monotonic()
        await asyncio.sleep(0.05)
        spans.append((start, time.monotonic()))

    blob = "x" * (256 * 1024 - 20)
    await client.insert_many([{"blob": blob}] * 24, kind="big", queue="q")
    await client.start([("q", 50)], max_args_bytes_in_flight=1024 * 1024, **FAST_WORKER)

    async def all_ran() -> bool:
        return len(spans) == 24

    await wait_for(all_ran, timeout=60)
    assert _most_at_once(spans) <= 4
    budget = client._worker.args_budget
    assert budget.peak <= 1024 * 1024 and budget.in_flight == 0


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = running = 0
    for _, change in events:  # an end sorts before a start at the same instant
        running += change
        most = max(most, running)
    return most


@pytest.mark.parametrize("setting", [0, -1, "64MB"])
async def test_the_budget_setting_is_validated(client: awa.AsyncClient, setting: Any) -> None:
    with pytest.raises(awa.InvalidSetting) as caught:
        await client.start([("q", 1)], max_args_bytes_in_flight=setting)
    assert caught.value.field == "max_args_bytes_in_flight"


async def test_a_finished_job_is_freed_without_the_cycle_collector(
    client: awa.AsyncClient,
) -> None:
    """With the cycle collector off, no finished job (and its args) is left in a
    reference cycle: the worker let go of it by reference counting alone. A cycle
    between a job and its attempt kept 512 finished jobs of 1 MiB args alive after a
    drain, until a full collection happened to run."""

    @client.task(None, kind="small", queue="q")
    async def small(job: awa.Job[Any]) -> None:
        job.set_progress(50)

    await client.insert_many([{"n": i} for i in range(20)], kind="small", queue="q")
    gc.collect()
    gc.disable()
    try:
        await client.start([("q", 4)], **FAST_WORKER)

        async def all_done() -> bool:
            return len(await client.list_jobs(state="completed")) == 20

        await wait_for(all_done)
        await client.shutdown()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [o for o in gc.garbage if isinstance(o, awa.Job)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []
