"""Lifecycle hooks: fired after the commit, never for stale attempts, failures isolated."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, noop_task, wait_for


async def test_events_for_every_outcome_after_commit(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    events: list[tuple[str, int, str | None, str]] = []

    def record(event: awa.JobEvent) -> None:
        # The state change is committed when the hook runs: the row already says so.
        row = db.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (event.job.id,))
        state = row.fetchone()
        events.append((event.name, event.job.id, event.error, state[0] if state else "gone"))

    async def record_async(event: awa.JobEvent) -> None:
        await asyncio.sleep(0)
        record(event)

    client.on_event("*", record)
    client.on_event(awa.JobCompleted, record_async)

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> Any:
        mode = job.args["mode"]
        if mode == "raise":
            raise ValueError("try again")
        if mode == "fatal":
            raise awa.TerminalError("give up")
        if mode == "cancel":
            return awa.Cancel("not wanted")
        return None

    ok = await client.insert({"mode": "ok"}, kind="k", queue="q")
    retried = await client.insert({"mode": "raise"}, kind="k", queue="q", max_attempts=2)
    fatal = await client.insert({"mode": "fatal"}, kind="k", queue="q")
    cancel = await client.insert({"mode": "cancel"}, kind="k", queue="q")
    await client.start([("q", 4)], **FAST_WORKER)
    try:

        async def all_seen() -> bool:
            names = [(e[0], e[1]) for e in events]
            return {("completed", ok.id), ("retried", retried.id), ("exhausted", fatal.id),
                    ("cancelled", cancel.id)} <= set(names)  # fmt: skip

        await wait_for(all_seen)
    finally:
        await client.shutdown()
    by_key = {(e[0], e[1]): e for e in events}
    assert {("started", j.id) for j in (ok, retried, fatal, cancel)} <= set(by_key)
    assert by_key[("started", ok.id)][3] == "running"
    assert by_key[("completed", ok.id)][3] == "completed"
    assert by_key[("retried", retried.id)][2:] == ("try again", "retryable")
    assert by_key[("exhausted", fatal.id)][2:] == ("give up", "failed")
    assert by_key[("cancelled", cancel.id)][2:] == ("not wanted", "cancelled")
    assert [e[0] for e in events].count("completed") == 2  # sync and async subscriber


async def test_failing_hooks_are_logged_and_never_affect_the_job(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(event: awa.JobEvent) -> None:
        calls.append("sync")
        raise RuntimeError("hook bug")

    async def broken_async(event: awa.JobEvent) -> None:
        calls.append("async")
        raise RuntimeError("async hook bug")

    client.on_event("completed", broken)
    client.on_event("completed", broken_async)
    client.on_event("started", lambda e: calls.append("other kind"), job_kind="other")

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    job = await client.insert({}, kind="k", queue="q")
    with caplog.at_level(logging.ERROR, logger="awa"):
        await client.start([("q", 1)], **FAST_WORKER)
        try:

            async def both() -> bool:
                return sorted(calls) == ["async", "sync"] and "async hook bug" in caplog.text

            await wait_for(both)
        finally:
            await client.shutdown()
    assert (await client.get_job(job.id)).state is awa.JobState.COMPLETED
    assert "hook bug" in caplog.text
    failures = [r for r in caplog.records if getattr(r, "event", None) == "hook_failed"]
    assert {(r.hook_event, r.job_id, r.kind) for r in failures} == {  # type: ignore[attr-defined]
        ("completed", job.id, "k")
    } and len(failures) == 2  # structured, as job records are (the sync and the async hook)


async def test_no_event_for_a_stale_attempt_but_one_for_an_operator_cancel(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    events: list[tuple[str, int]] = []
    client.on_event("*", lambda e: events.append((e.name, e.job.id)))
    started = asyncio.Event()
    gate = asyncio.Event()

    @client.task(None, kind="stale", queue="q")
    async def stale(job: awa.Job[Any]) -> None:
        started.set()
        await asyncio.shield(gate.wait())

    @client.task(None, kind="long", queue="q")
    async def long(job: awa.Job[Any]) -> None:
        await asyncio.Event().wait()

    job = await client.insert({}, kind="stale", queue="q")
    running = await client.insert({}, kind="long", queue="q")
    await client.start([("q", 2)], **{**FAST_WORKER, "heartbeat_interval_ms": 60_000,
                                       "heartbeat_staleness_ms": 120_000})  # fmt: skip
    try:
        await asyncio.wait_for(started.wait(), 15)
        db.execute("UPDATE awa.jobs SET run_lease = run_lease + 1 WHERE id = %s", (job.id,))
        gate.set()
        completer = client._worker.completer

        async def fenced() -> bool:
            return bool(completer.stale >= 1)

        await wait_for(fenced)
        await wait_for(lambda: _state_is(client, running.id, awa.JobState.RUNNING))
        await client.cancel(running.id)

        async def cancelled_event() -> bool:
            return ("cancelled", running.id) in events

        await wait_for(cancelled_event)
    finally:
        db.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = %s", (job.id,))
        await client.shutdown()
    assert ("completed", job.id) not in events and ("started", job.id) in events


async def _state_is(client: awa.AsyncClient, job_id: int, state: awa.JobState) -> bool:
    return (await client.get_job(job_id)).state is state


async def test_unknown_event_names_and_late_registration_are_rejected(
    client: awa.AsyncClient,
) -> None:
    with pytest.raises(awa.ValidationError, match="unknown event") as info:
        client.on_event("finished", print)
    assert info.value.field == "event"
    with pytest.raises(awa.ValidationError):
        client.on_event("completed", "not callable")  # type: ignore[arg-type]
    noop_task(client)
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        with pytest.raises(awa.ValidationError, match="before start") as late:
            client.on_event("completed", print)
        assert late.value.field == "on_event"
        with pytest.raises(awa.ValidationError, match="before start"):
            client.periodic("late", "@daily", {}, kind="k")
    finally:
        await client.shutdown()


@dataclasses.dataclass
class Mail:
    to: str


async def test_event_jobs_carry_typed_args_and_the_state_they_ended_in(
    client: awa.AsyncClient,
) -> None:
    """`started` saw the args still as stored JSON, and outcome events the job as claimed
    (state running, without the attempt's error)."""
    seen: list[tuple[str, int, str, awa.JobState, str | None]] = []
    client.on_event("*", lambda e: seen.append((
        e.name, e.job.id, type(e.job.args).__name__, e.job.state,
        e.job.errors[-1]["error"] if e.job.errors else None)))  # fmt: skip

    @client.task(Mail, queue="q")
    async def send(job: awa.Job[Mail]) -> None:
        if job.args.to == "bad":
            raise awa.TerminalError("bounced")

    ok, bad = await client.insert(Mail("ok")), await client.insert(Mail("bad"))
    await client.start([("q", 2)], **FAST_WORKER)
    try:

        async def both_ended() -> bool:
            return len([s for s in seen if s[0] != "started"]) == 2

        await wait_for(both_ended)
    finally:
        await client.shutdown()
    assert sorted(seen) == sorted([
        ("started", ok.id, "Mail", awa.JobState.RUNNING, None),
        ("started", bad.id, "Mail", awa.JobState.RUNNING, None),
        ("completed", ok.id, "Mail", awa.JobState.COMPLETED, None),
        ("exhausted", bad.id, "Mail", awa.JobState.FAILED, "bounced"),
    ])  # fmt: skip


async def test_a_hook_raising_cancelled_error_stops_no_later_event(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain function's CancelledError is its own (nothing awaits in it): it ended the
    task that fires outcome hooks, and every later outcome fired nothing, silently."""
    completed: list[int] = []

    def hook(event: awa.JobEvent) -> None:
        if not completed:
            completed.append(0)
            raise asyncio.CancelledError
        completed.append(event.job.id)

    client.on_event("completed", hook)
    noop_task(client, "q", "k")
    first = await client.insert({}, kind="k", queue="q")
    with caplog.at_level(logging.ERROR, logger="awa"):
        await client.start([("q", 1)], **FAST_WORKER)
        try:

            async def first_seen() -> bool:
                return completed == [0]

            await wait_for(first_seen)
            later = [await client.insert({"n": n}, kind="k", queue="q") for n in range(3)]

            async def later_seen() -> bool:
                return sorted(completed[1:]) == sorted(j.id for j in later)

            await wait_for(later_seen)
        finally:
            await client.shutdown()
    assert f"failed on completed of job {first.id}" in caplog.text
