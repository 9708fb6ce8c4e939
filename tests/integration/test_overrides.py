"""Runtime overrides (design record 038) applied live by a running worker."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import pytest

import awa
from awa.worker.observe import Observer
from tests.helpers import FAST_WORKER, noop_task, wait_for


def _effective(client: awa.AsyncClient, queue: str) -> dict[str, Any]:
    return client.runtime_snapshot().queues[queue].effective


async def _effective_is(client: awa.AsyncClient, queue: str, key: str, value: Any) -> bool:
    return _effective(client, queue)[key] == value


async def test_set_get_clear_are_whole_state_writes(client: awa.AsyncClient) -> None:
    assert await client.queue_runtime_overrides("q") is None
    first = await client.set_runtime_overrides("q", poll_interval_ms=500, rate_limit=2.5)
    assert (first.poll_interval_ms, first.rate_limit, first.claim_batch_size) == (500, 2.5, None)
    assert first.updated_at is not None
    second = await client.set_runtime_overrides("q", claim_batch_size=8)
    assert (second.poll_interval_ms, second.rate_limit, second.claim_batch_size) == (None, None, 8)
    assert second.updated_at is not None and second.updated_at >= first.updated_at
    cleared = await client.clear_runtime_overrides("q")
    assert (cleared.poll_interval_ms, cleared.claim_batch_size, cleared.deadline_ms) == (
        None, None, None,
    )  # fmt: skip
    # Not paused, no DLQ flag: the cleared row held nothing else and went with the clear.
    assert await client.queue_runtime_overrides("q") is None


async def test_clearing_a_queue_without_a_control_row_writes_none(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    cleared = await client.clear_runtime_overrides("typo")  # a mistyped name
    assert cleared == awa.RuntimeOverrides(None, None, None, None, None)
    assert db.execute("SELECT count(*) FROM awa.queue_meta").fetchone() == (0,)
    assert [stat.queue for stat in await client.queue_stats()] == []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"poll_interval_ms": 0}, "poll_interval_ms"),
        ({"claim_batch_size": -1}, "claim_batch_size"),
        ({"rate_limit": 0}, "rate_limit"),
        ({"rate_limit": float("inf")}, "rate_limit"),
        ({"deadline_ms": -1}, "deadline_ms"),
        ({"poll_interval_ms": 1.5}, "poll_interval_ms"),
        ({"claim_batch_size": 2**31}, "claim_batch_size"),
        ({"deadline_ms": 2**40}, "deadline_ms"),
    ],
)
async def test_invalid_overrides_write_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any], options: dict[str, Any], field: str
) -> None:
    await client.set_runtime_overrides("q", claim_batch_size=4)
    with pytest.raises(awa.ValidationError) as info:
        await client.set_runtime_overrides("q", **options)
    assert info.value.field == field
    row = db.execute("SELECT override_claim_batch_size FROM awa.queue_meta").fetchall()
    assert row == [(4,)]


async def test_overrides_apply_live_and_clear_restores_start_values(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    seen: list[awa.Job[Any]] = []

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        seen.append(job)

    await client.start([awa.QueueConfig("q", max_workers=4, deadline_ms=300_000)], **FAST_WORKER)
    try:
        await client.set_runtime_overrides(
            "q", deadline_ms=2_000, claim_batch_size=3, poll_interval_ms=700
        )
        await wait_for(lambda: _effective_is(client, "q", "deadline_ms", 2_000))
        assert _effective(client, "q")["claim_batch_size"] == 3
        assert _effective(client, "q")["poll_interval_ms"] == 700
        first = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, first.id))
        claimed = await client.get_job(first.id)
        assert claimed.deadline_at is not None and claimed.attempted_at is not None
        assert (claimed.deadline_at - claimed.attempted_at).total_seconds() == pytest.approx(2.0)

        await client.clear_runtime_overrides("q")
        await wait_for(lambda: _effective_is(client, "q", "deadline_ms", 300_000))
        snapshot = client.runtime_snapshot().queues["q"]
        assert snapshot.effective == snapshot.configured
        second = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, second.id))
        job = await client.get_job(second.id)
        assert job.deadline_at is not None and job.attempted_at is not None
        assert (job.deadline_at - job.attempted_at).total_seconds() == pytest.approx(300.0)
    finally:
        await client.shutdown()


async def _completed(client: awa.AsyncClient, job_id: int) -> bool:
    return (await client.get_job(job_id)).state is awa.JobState.COMPLETED


class ClaimSizes(Observer):
    """Records the size of every claim a worker makes, per queue."""

    def __init__(self) -> None:
        self.sizes: dict[str, list[int]] = {}

    def polled(self, queue: str, claimed: int, rate_limited: bool) -> None:
        if claimed:
            self.sizes.setdefault(queue, []).append(claimed)


async def test_claim_batch_size_override_limits_each_claim(client: awa.AsyncClient) -> None:
    await client.insert_many([{} for _ in range(20)], kind="k", queue="q")
    gate = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        await gate.wait()

    claims = ClaimSizes()
    client.add_observer(claims)
    await client.pause_queue("q")
    await client.set_runtime_overrides("q", claim_batch_size=2)
    await client.start([("q", 10)], **FAST_WORKER)
    try:
        await wait_for(lambda: _effective_is(client, "q", "claim_batch_size", 2))
        await client.resume_queue("q")
        await wait_for(lambda: _in_flight(client, "q", 10))
        # Ten jobs in flight out of twenty waiting, every claim at most two.
        assert claims.sizes["q"] == [2, 2, 2, 2, 2]
        gate.set()
    finally:
        await client.shutdown()


@pytest.mark.parametrize("notice", [True, False])
async def test_an_override_lands_within_a_cadence_under_a_backlog_that_never_empties(
    client: awa.AsyncClient, db: psycopg.Connection[Any], notice: bool
) -> None:
    """Design record 038's incident: a hot queue that never goes idle. Claims of two keep
    coming back full, so the dispatcher never leaves its drain; the override must land
    anyway — through its notice, or on the cadence when the write sends none."""
    await client.insert_many([{}] * 20_000, kind="fast", queue="q")

    @client.task(None, kind="fast", queue="q")
    async def fast(job: awa.Job[Any]) -> None:
        return None

    claims = ClaimSizes()
    client.add_observer(claims)
    await client.set_runtime_overrides("q", claim_batch_size=2)
    await client.start([("q", 50)], **{**FAST_WORKER, "override_refresh_ms": 200})
    try:
        await wait_for(lambda: _effective_is(client, "q", "claim_batch_size", 2))

        async def draining() -> bool:
            return len(claims.sizes.get("q", [])) >= 50

        await wait_for(draining)
        if notice:
            await client.set_runtime_overrides("q", claim_batch_size=7)
        else:  # behind the workers' back: only the cadence can carry it
            db.execute("UPDATE awa.queue_meta SET override_claim_batch_size = 7")
        await wait_for(lambda: _effective_is(client, "q", "claim_batch_size", 7))

        async def claims_of_seven() -> bool:
            return 7 in claims.sizes["q"]

        await wait_for(claims_of_seven)
        left = db.execute("SELECT count(*) FROM awa.jobs WHERE state = 'available'").fetchone()
        assert left is not None and left[0] > 0  # the backlog outlasted the change
    finally:
        await client.drain_queue("q")
        await client.shutdown()


async def _in_flight(client: awa.AsyncClient, queue: str, n: int) -> bool:
    return (await client.health_check()).queues[queue].in_flight == n


async def test_refresh_happens_on_the_cadence_without_a_notice(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWA_OVERRIDE_REFRESH_MS", "10")  # floored at 50 ms
    noop_task(client)
    await client.start([("q", 1)], **FAST_WORKER)
    try:
        worker = client._worker
        assert worker.config.override_refresh_ms == 50
        # Written behind the worker's back: no awa_control notice is sent.
        db.execute(
            "INSERT INTO awa.queue_meta (queue, override_poll_interval_ms, overrides_updated_at) "
            "VALUES ('q', 1234, now())"
        )
        await wait_for(lambda: _effective_is(client, "q", "poll_interval_ms", 1234))
    finally:
        await client.shutdown()


async def test_bad_refresh_env_warns_and_keeps_the_default(
    client: awa.AsyncClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AWA_OVERRIDE_REFRESH_MS", "soon")
    noop_task(client)
    with caplog.at_level(logging.WARNING, logger="awa"):
        await client.start([("q", 1)], **FAST_WORKER)
    try:
        assert client._worker.config.override_refresh_ms == 10_000
        assert any("AWA_OVERRIDE_REFRESH_MS" in r.getMessage() for r in caplog.records)
    finally:
        await client.shutdown()


async def test_the_deadline_guard_rail_is_logged_and_reported_and_a_rate_override_makes_a_limiter(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    noop_task(client, queue="plain")
    await client.start(
        [awa.QueueConfig("plain"), awa.QueueConfig("nodeadline", deadline_ms=0)], **FAST_WORKER
    )
    try:
        with caplog.at_level(logging.WARNING, logger="awa"):
            await client.set_runtime_overrides("plain", rate_limit=5.0)
            await client.set_runtime_overrides("nodeadline", deadline_ms=1_000)

            async def both_seen() -> bool:
                snap = client.runtime_snapshot()
                return snap.queues["plain"].effective["rate_limit"] == 5.0 and (
                    "deadline_ms" in snap.queues["nodeadline"].ignored
                )

            await wait_for(both_seen)
        snap = client.runtime_snapshot()
        assert snap.queues["plain"].ignored == {}  # the record's first guard rail is lifted
        assert client._worker.dispatchers["plain"].control.bucket.rate == 5.0
        assert snap.queues["nodeadline"].effective["deadline_ms"] == 0
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert not any("plain" in m for m in messages)
        assert any("nodeadline" in m and "zero boundary" in m for m in messages)

        # Published for the fleet too (at the publisher's next tick, run here).
        async def published() -> bool:
            await client._worker.publisher._tick()
            (instance,) = await client.list_runtime_instances()
            assert instance.snapshot is not None
            return "deadline_ms" in instance.snapshot.queues["nodeadline"].ignored

        await wait_for(published)
        # Clearing the override removes the limiter it created.
        await client.clear_runtime_overrides("plain")

        async def limiter_gone() -> bool:
            return client.runtime_snapshot().queues["plain"].effective["rate_limit"] is None

        await wait_for(limiter_gone)
        assert client._worker.dispatchers["plain"].control.bucket is None
    finally:
        await client.shutdown()


async def test_rate_override_holds_ten_jobs_per_second(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A 10/s override on a big backlog: started jobs per second stay within ±20 %."""

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    await client.insert_many([{} for _ in range(400)], kind="k", queue="q")
    await client.pause_queue("q")
    await client.start([awa.QueueConfig("q", max_workers=50, rate_limit=(1_000, 0))], **FAST_WORKER)
    try:
        await client.set_runtime_overrides("q", rate_limit=10)
        await wait_for(lambda: _effective_is(client, "q", "rate_limit", 10))
        await client.resume_queue("q")

        async def started_after(seconds: float) -> int:
            row = db.execute(
                "SELECT count(*), extract(epoch FROM max(attempted_at) - min(attempted_at)) "
                "FROM awa.jobs WHERE attempted_at IS NOT NULL"
            ).fetchone()
            assert row is not None
            return int(row[0]) if row[1] is not None and row[1] >= seconds else 0

        await wait_for(lambda: started_after(6.0), timeout=30)
        # Skip the first second (the initial burst of ceil(rate) tokens), count 5 s after it.
        row = db.execute(
            "WITH t AS (SELECT min(attempted_at) AS t0 FROM awa.jobs) "
            "SELECT count(*) FROM awa.jobs, t WHERE attempted_at >= t0 + interval '1 second' "
            "AND attempted_at < t0 + interval '6 seconds'"
        ).fetchone()
        assert row is not None
        assert 40 <= row[0] <= 60, f"{row[0]} jobs started in 5 s at a 10/s limit"
    finally:
        await client.shutdown()


async def test_the_poll_interval_override_paces_how_an_idle_queue_finds_unannounced_jobs(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A job inserted without a notice is found only by polling: on the overridden poll
    interval, not the configured one (the effective value is not merely reported)."""

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    # Polls every 50 ms; a cadence of 10 min, which caps the overridden poll (CONTRACT §5).
    await client.start([("q", 2)], **{**FAST_WORKER, "override_refresh_ms": 600_000})
    try:
        # Listening first: the listener's connect looks for work once (notices sent before
        # it were lost), which would find the job below without any poll.
        async def listening() -> bool:
            return client._worker.listener.connected

        await wait_for(listening)
        await client.set_runtime_overrides("q", poll_interval_ms=60_000)
        await wait_for(lambda: _effective_is(client, "q", "poll_interval_ms", 60_000))
        dispatcher = client._worker.dispatchers["q"]

        async def slow_probe_scheduled() -> bool:  # the last probe used the new interval
            # At rest too: the override's own wake-up makes the dispatcher claim once, and
            # that claim (still on its way under load) would find the job inserted below.
            # And no probe on its way: one chosen under the old interval may still be
            # waiting for a connection, and would see the job when it runs.
            return (
                dispatcher.at_rest
                and dispatcher.probe_due - time.monotonic() > 30
                and not client._worker.idle_prober.probing
            )

        await wait_for(slow_probe_scheduled)
        (job_id,) = db.execute(  # no pg_notify: only a poll can find it
            "INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q') RETURNING id"
        ).fetchone() or (None,)
        await asyncio.sleep(1.0)  # 20 of the configured polls; none of the overridden one
        assert (await client.get_job(job_id)).state is awa.JobState.AVAILABLE
        await client.set_runtime_overrides("q", poll_interval_ms=100)
        await wait_for(lambda: _completed(client, job_id))
    finally:
        await client.shutdown()


async def test_the_control_rows_are_read_once_per_cadence_not_per_poll(
    client: awa.AsyncClient,
) -> None:
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    await client.insert_many([{}] * 300, kind="k", queue="q")
    claims = ClaimSizes()
    client.add_observer(claims)
    settings = {**FAST_WORKER, "override_refresh_ms": 600_000}
    await client.start([awa.QueueConfig("q", claim_batch_size=5, poll_interval_ms=50)], **settings)
    try:

        async def drained() -> bool:
            return sum(claims.sizes.get("q", [])) == 300

        await wait_for(drained)
        # Sixty claims or more, yet the control rows were read at start, once when the
        # listener connected (notices sent before it were lost) and once at the cadence's
        # first tick: never per poll.
        assert len(claims.sizes["q"]) >= 60
        assert client._worker.control.refreshes <= 3
    finally:
        await client.shutdown()


async def test_a_queue_held_at_its_fleet_cap_rechecks_on_the_overridden_poll_interval(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A dispatcher held back by the fleet waits for a freed-slot notice; a slot freed
    without one (here: a row changed by hand) is found by its timed re-check, paced by the
    poll interval in force — the override, not the start value of 60 s."""
    release = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        if job.args["hold"]:
            await release.wait()

    await client.set_queue_limits("q", concurrency=1)
    first = await client.insert({"hold": True}, kind="k", queue="q")
    await client.start([awa.QueueConfig("q", poll_interval_ms=60_000)], **FAST_WORKER)
    try:
        await wait_for(lambda: _in_flight(client, "q", 1))
        await client.set_runtime_overrides("q", poll_interval_ms=100)
        await wait_for(lambda: _effective_is(client, "q", "poll_interval_ms", 100))
        second = await client.insert({"hold": False}, kind="k", queue="q")
        dispatcher = client._worker.dispatchers["q"]

        async def held() -> bool:
            return dispatcher.blocked == "concurrency"

        await wait_for(held)
        db.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = %s", (first.id,))
        await wait_for(lambda: _completed(client, second.id))
    finally:
        release.set()
        await client.shutdown()


async def test_an_applied_override_is_published_at_once_for_overrides_show(
    client: awa.AsyncClient,
) -> None:
    noop_task(client, "q")
    # The longest cadence there is: the wait below is shorter than one period.
    await client.start([("q", 4)], **{**FAST_WORKER, "runtime_snapshot_interval_ms": 10_000})
    try:

        async def published_max_workers() -> Any:
            instances = await client.list_runtime_instances()
            if not instances or instances[0].snapshot is None:
                return None
            return instances[0].snapshot.queues["q"].effective["max_workers"]

        await client.set_runtime_overrides("q", max_workers=2)
        await wait_for(lambda: _equals(published_max_workers(), 2), timeout=5)
    finally:
        await client.shutdown()


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_a_rate_written_by_hand_that_no_bucket_can_run_is_refused_not_fatal(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    for bad in ("NaN", "Infinity"):
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute(
                "INSERT INTO awa.queue_meta (queue, override_rate_limit) VALUES ('a', %s)", (bad,)
            )
    db.execute("INSERT INTO awa.queue_meta (queue, override_rate_limit) VALUES ('a', 1e300)")
    noop_task(client, "a")
    await client.start([("a", 2), ("b", 2)], **FAST_WORKER)  # starts despite the row
    try:
        a = client.runtime_snapshot().queues["a"]
        assert a.effective["rate_limit"] is None and "rate_limit" in a.ignored
        await client.set_runtime_overrides("b", max_workers=1)  # the refresh goes on
        await wait_for(lambda: _effective_is(client, "b", "max_workers", 1))
    finally:
        await client.shutdown()


async def test_restating_an_unchanged_minimum_keeps_its_place_before_a_refused_one(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Global 10. ma is given 6, then mb 6 (refused beside ma's), then ma's overrides are
    rewritten with the same 6 and a poll interval: ma's minimum stays the older one."""
    from psycopg.rows import dict_row

    from awa.config import QueueConfig
    from awa.db import sql
    from awa.worker.control import QueueControl, minimums_refusal

    await client.set_runtime_overrides("ma", min_workers=6)
    await client.set_runtime_overrides("mb", min_workers=6)
    await client.set_runtime_overrides("ma", min_workers=6, poll_interval_ms=100)
    with db.cursor(row_factory=dict_row) as cur:
        rows = {
            r["queue"]: r for r in cur.execute(sql.QUEUE_CONTROL_LIST, {"queues": ["ma", "mb"]})
        }
    controls = [QueueControl(QueueConfig(q, min_workers=2), weighted=True) for q in ("ma", "mb")]
    assert list(minimums_refusal(controls, rows, 10)) == ["mb"]
    await client.set_runtime_overrides("ma", min_workers=5)  # a changed minimum: a new write
    with db.cursor(row_factory=dict_row) as cur:
        rows = {
            r["queue"]: r for r in cur.execute(sql.QUEUE_CONTROL_LIST, {"queues": ["ma", "mb"]})
        }
    assert list(minimums_refusal(controls, rows, 10)) == ["ma"]
