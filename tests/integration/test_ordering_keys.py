"""Ordering keys (ADR 0034) on real PostgreSQL: jobs sharing a key are claimable one at a
time, in insertion order, by every claim path; other keys and key-less jobs are not held.

The claims here call the claim functions the workers call (awa.claim, and through it
awa.claim_coordinated); state changes a worker would make are written directly, so each
step of a key's line can be checked on its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
import awa.testing
from awa.bridge import insert_job
from awa.db import sql
from tests.helpers import FAST_WORKER, lead_maintenance, wait_for


def _claim(db: psycopg.Connection[Any], queue: str = "q", limit: int = 10) -> list[int]:
    rows = db.execute(
        "SELECT id FROM awa.claim(%s, %s, 0, 'on') WHERE id IS NOT NULL", (queue, limit)
    ).fetchall()
    return sorted(r[0] for r in rows)


def _set_state(db: psycopg.Connection[Any], job_id: int, state: str) -> None:
    finalized = state in ("completed", "failed", "cancelled")
    db.execute(
        "UPDATE awa.jobs SET state = %s::awa.job_state, "
        "finalized_at = CASE WHEN %s THEN now() END WHERE id = %s",
        (state, finalized, job_id),
    )


async def _insert(client: awa.AsyncClient, key: str | None, n: int = 1, **opts: Any) -> list[int]:
    jobs = [
        await client.insert({"n": i}, kind="work", queue="q", ordering_key=key, **opts)
        for i in range(n)
    ]
    return [job.id for job in jobs]


async def test_a_key_runs_its_jobs_one_at_a_time_in_insertion_order(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _insert(client, "acct-1", 3)
    for expected in ids:
        assert _claim(db) == [expected]  # only the head, never two at once
        assert _claim(db) == []  # running: the next waits
        _set_state(db, expected, "completed")
    assert _claim(db) == []


async def test_other_keys_and_key_less_jobs_are_not_held(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    a1, a2 = await _insert(client, "a", 2)
    (b1,) = await _insert(client, "b")
    plain = await _insert(client, None, 2)
    assert _claim(db) == sorted([a1, b1, *plain])
    assert a2 not in _claim(db)


async def test_the_claim_limit_is_shared_in_dispatch_order(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    (late_plain,) = await _insert(client, None, priority=3)
    (urgent,) = await _insert(client, "a", priority=1)
    (plain,) = await _insert(client, None, priority=2)
    assert _claim(db, limit=2) == sorted([urgent, plain])
    assert _claim(db, limit=2) == [late_plain]


async def test_a_retrying_earlier_job_holds_the_later_ones_until_it_completes(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    first, second = await _insert(client, "k", 2)
    assert _claim(db) == [first]
    db.execute("UPDATE awa.jobs SET state = 'retryable', run_at = now() WHERE id = %s", (first,))
    assert _claim(db) == []  # retryable is unfinished: the line does not move
    epoch = lead_maintenance(db)
    db.execute(sql.JOB_PROMOTE_DUE, {"epoch": epoch, "limit": 100})
    assert _claim(db) == [first]  # its retry comes before the next job
    _set_state(db, first, "completed")
    assert _claim(db) == [second]


@pytest.mark.parametrize("final", ["failed", "cancelled"])
async def test_a_failed_or_cancelled_earlier_job_releases_the_later_ones(
    client: awa.AsyncClient, db: psycopg.Connection[Any], final: str
) -> None:
    first, second = await _insert(client, "k", 2)
    assert _claim(db) == [first]
    _set_state(db, first, final)
    assert _claim(db) == [second]


async def test_a_scheduled_earlier_job_holds_its_key(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    (first,) = await _insert(client, "k", run_at=later)
    (second,) = await _insert(client, "k")
    (other,) = await _insert(client, None)
    assert _claim(db) == [other]
    await client.cancel(first)
    assert _claim(db) == [second]


async def test_a_key_spans_queues(client: awa.AsyncClient, db: psycopg.Connection[Any]) -> None:
    first = await client.insert({}, kind="work", queue="one", ordering_key="k")
    second = await client.insert({}, kind="work", queue="two", ordering_key="k")
    assert _claim(db, "two") == []
    assert _claim(db, "one") == [first.id]
    _set_state(db, first.id, "completed")
    assert _claim(db, "two") == [second.id]


async def test_a_lower_id_committed_late_waits_for_the_running_one(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    with psycopg.connect(database_url) as slow:
        row = slow.execute(
            "INSERT INTO awa.jobs (kind, queue, ordering_key) VALUES ('work', 'q', 'k') "
            "RETURNING id"
        ).fetchone()
        assert row is not None
        (fast,) = await _insert(client, "k")
        assert _claim(db) == [fast]  # the lower id is not committed yet
        slow.commit()
    late = row[0]
    assert late < fast
    assert _claim(db) == []  # the key is held by the job that started
    _set_state(db, fast, "completed")
    assert _claim(db) == [late]


async def test_a_claim_in_flight_holds_its_key_against_a_concurrent_claim(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The race the key lock closes: one claimer starts the later job of a key while the
    earlier one is not yet visible to it; a second claimer whose snapshot sees the earlier
    job but not the first claim must not start it too."""
    with (
        psycopg.connect(database_url) as slow_insert,
        psycopg.connect(database_url) as first_claimer,
    ):
        row = slow_insert.execute(
            "INSERT INTO awa.jobs (kind, queue, ordering_key) VALUES ('work', 'q', 'k') "
            "RETURNING id"
        ).fetchone()
        assert row is not None
        (later,) = await _insert(client, "k")
        assert _claim(first_claimer) == [later]  # its transaction stays open
        slow_insert.commit()
        assert _claim(db) == []  # sees the earlier job, not the open claim: the lock says no
        first_claimer.commit()
        assert _claim(db) == []  # now it sees the running job
        _set_state(db, later, "completed")
        assert _claim(db) == [row[0]]


async def test_ordered_jobs_respect_a_fleet_concurrency_cap(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("q", concurrency=2)
    a1, a2 = await _insert(client, "a", 2)
    (b1,) = await _insert(client, "b")
    plain = await _insert(client, None, 2)
    assert _claim(db) == sorted([a1, b1])  # dispatch order, the cap of 2
    assert _claim(db) == []
    _set_state(db, a1, "completed")
    assert _claim(db) == [a2]
    _set_state(db, b1, "completed")
    _set_state(db, a2, "completed")
    assert _claim(db) == plain


async def test_ordered_jobs_keep_their_line_in_a_partitioned_queue(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("q", concurrency=5, partition_by="tenant")
    first = await client.insert({"tenant": "t1"}, kind="work", queue="q", ordering_key="k")
    second = await client.insert({"tenant": "t2"}, kind="work", queue="q", ordering_key="k")
    other = await client.insert({"tenant": "t2"}, kind="work", queue="q")
    assert _claim(db) == [first.id, other.id]
    _set_state(db, first.id, "completed")
    assert _claim(db) == [second.id]


async def test_a_pool_member_with_only_ordered_jobs_asks_for_room(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.set_fleet_pool(2, {"q": awa.PoolMember(min_workers=0, weight=1)})
    first, second = await _insert(client, "k", 2)
    assert _claim(db) == [first]
    assert _claim(db) == []
    _set_state(db, first, "completed")
    assert _claim(db) == [second]


async def test_jobs_carry_their_key_everywhere(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    job = await client.insert({}, kind="work", queue="q", ordering_key="acct-9")
    (many,) = await client.insert_many([{"x": 1}], kind="work", queue="q", ordering_key="m")
    (item,) = await client.insert_many([awa.InsertItem({}, kind="work", ordering_key="i")])
    assert (job.ordering_key, many.ordering_key, item.ordering_key) == ("acct-9", "m", "i")
    assert (await client.get_job(job.id)).ordering_key == "acct-9"
    rows = db.execute("SELECT id, ordering_key FROM awa.claim('q', 10, 0, 'on')").fetchall()
    assert sorted(rows) == [(job.id, "acct-9"), (many.id, "m")]
    assert (await client.get_job(item.id)).ordering_key == "i"


async def test_the_dead_letter_queue_keeps_the_key(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    first, second = await _insert(client, "k", 2)
    assert _claim(db) == [first]
    _set_state(db, first, "failed")
    await client.move_failed_to_dlq(ids=[first])
    assert _claim(db) == [second]
    assert (await client.get_dlq_job(first)).job.ordering_key == "k"
    await client.retry_from_dlq(ids=[first])
    assert (await client.get_job(first)).ordering_key == "k"
    assert _claim(db) == []  # back in line behind the running job


@pytest.mark.parametrize(
    ("value", "reason"),
    [("", "must not be empty"), ("x" * 256, "at most 255"), (42, "must be a string")],
)
async def test_a_bad_key_is_refused_and_nothing_is_written(
    client: awa.AsyncClient, db: psycopg.Connection[Any], value: Any, reason: str
) -> None:
    with pytest.raises(awa.ValidationError) as exc:
        await client.insert({}, kind="work", ordering_key=value)
    assert exc.value.field == "ordering_key" and reason in str(exc.value)
    with pytest.raises(awa.ValidationError) as exc:
        await client.insert_many([{}], kind="work", ordering_key=value)
    assert exc.value.field == "ordering_key"
    with pytest.raises(awa.ValidationError) as exc:
        await client.insert_many([awa.InsertItem({}, kind="work", ordering_key=value)])
    assert exc.value.field == "args_list[0].ordering_key"
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)


def test_the_sync_client_and_the_bridge_take_a_key(
    sync_client: awa.Client, database_url: str
) -> None:
    job = sync_client.insert({}, kind="work", queue="q", ordering_key="s")
    assert sync_client.get_job(job.id).ordering_key == "s"
    with psycopg.connect(database_url) as conn:
        bridged = insert_job(conn, {}, kind="work", queue="q", ordering_key="b")
    assert isinstance(bridged, awa.Job)
    assert sync_client.get_job(bridged.id).ordering_key == "b"


async def test_a_worker_runs_each_key_in_order_one_at_a_time(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Eight permits, three keys of five jobs and key-less jobs: judged from what ran."""
    running: dict[str, int] = {}
    overlaps: list[str] = []
    started: list[tuple[str | None, int]] = []

    @client.task(dict, kind="work", queue="q")
    async def work(job: awa.Job[Any]) -> None:
        key = job.ordering_key
        started.append((key, job.id))
        if key is not None:
            running[key] = running.get(key, 0) + 1
            if running[key] > 1:
                overlaps.append(key)
        await asyncio.sleep(0)  # let other handlers interleave
        await asyncio.sleep(0.01)
        if key is not None:
            running[key] -= 1

    inserted: dict[str | None, list[int]] = {}
    for round_ in range(5):
        for key in ("a", "b", "c", None):
            job = await client.insert({"r": round_}, kind="work", queue="q", ordering_key=key)
            inserted.setdefault(key, []).append(job.id)
    await client.start([("q", 8)], **FAST_WORKER)
    try:

        async def all_done() -> bool:
            row = db.execute("SELECT count(*) FROM awa.jobs WHERE state <> 'completed'").fetchone()
            return row == (0,)

        await wait_for(all_done)
    finally:
        await client.shutdown()
    assert overlaps == []
    for key in ("a", "b", "c"):
        assert [i for k, i in started if k == key] == inserted[key]


async def test_explain_names_the_job_a_key_waits_for(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    first, second, third = await _insert(client, "acct-7", 3)
    assert _claim(db) == [first]
    found = await client.explain(third)
    top = found.reasons[0]
    assert top.code == awa.ReasonCode.ORDERED_BEHIND
    assert top.details["waiting_for"] == first
    assert top.details["waiting_for_state"] == "running"
    assert top.details["ahead"] == 2
    assert f"job {first} (running" in top.message and "'acct-7'" in top.message
    assert f"waits for job {first}" in found.summary
    _set_state(db, first, "completed")
    found = await client.explain(third)
    assert found.reasons[0].details["waiting_for"] == second
    assert found.reasons[0].details["waiting_for_state"] == "available"
    assert all(
        r.code != awa.ReasonCode.ORDERED_BEHIND for r in (await client.explain(second)).reasons
    )


async def test_explain_names_a_started_job_that_holds_the_key(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    with psycopg.connect(database_url) as slow:
        row = slow.execute(
            "INSERT INTO awa.jobs (kind, queue, ordering_key) VALUES ('work', 'q', 'k') "
            "RETURNING id"
        ).fetchone()
        assert row is not None
        (fast,) = await _insert(client, "k")
        assert _claim(db) == [fast]
        slow.commit()
    top = (await client.explain(row[0])).reasons[0]
    assert top.code == awa.ReasonCode.ORDERED_BEHIND
    assert (top.details["waiting_for"], top.details["ahead"]) == (fast, 0)
    assert "has started" in top.message


async def test_a_job_failing_into_the_dead_letter_queue_releases_its_key(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('q', true)")
    first, second = await _insert(client, "k", 2)
    assert _claim(db) == [first]
    with db.cursor() as cur:
        cur.execute("LISTEN awa_available")
        _set_state(db, first, "failed")  # the DLQ trigger moves it out of awa.jobs
        notices = list(db.notifies(timeout=5, stop_after=1))
    assert [n.payload for n in notices] == ["q"]  # the key's next job woke its queue
    assert db.execute("SELECT count(*) FROM awa.jobs WHERE id = %s", (first,)).fetchone() == (0,)
    assert _claim(db) == [second]


async def test_a_long_blocked_backlog_does_not_hide_a_later_key(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """More blocked jobs of one key than the claim reads in dispatch order: the claim then
    visits the waiting keys one by one and still finds the later key's turn."""
    (head,) = await _insert(client, "deep")
    assert _claim(db) == [head]
    await client.insert_many([{"n": i} for i in range(250)], kind="work", queue="q",
                             ordering_key="deep")  # fmt: skip
    (late,) = await _insert(client, "late")
    assert _claim(db) == [late]


async def test_the_dashboards_job_page_shows_the_key_and_why_it_waits(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    pytest.importorskip("fastapi")
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from awa.contrib.starlette import mount_dashboard

    first, second = await _insert(client, "acct <7>", 2)
    assert _claim(db) == [first]
    app = FastAPI()
    mount_dashboard(app, "/awa", database_url=database_url, token=None)

    def page() -> str:
        with TestClient(app) as http:
            response = http.get(f"/awa/jobs/{second}")
            assert response.status_code == 200
            return response.text

    text = await asyncio.to_thread(page)
    assert 'id="job-ordering-key">acct &lt;7&gt;</td>' in text  # escaped
    assert 'data-code="ordered_behind"' in text


@dataclasses.dataclass
class Step:
    n: int


async def test_work_one_runs_only_a_keys_turn(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    done: list[int] = []

    async def handle(job: awa.Job[Step]) -> None:
        done.append(job.args.n)

    first = await client.insert(Step(1), queue="q", ordering_key="k")
    await client.insert(Step(2), queue="q", ordering_key="k")
    assert _claim(db) == [first.id]  # the first runs elsewhere
    result = await awa.testing.work_one(client, Step, handler=handle, queue="q")
    assert result.outcome == "no_job" and done == []
    _set_state(db, first.id, "completed")
    result = await awa.testing.work_one(client, Step, handler=handle, queue="q")
    assert result.outcome == "completed" and done == [2]
    by_queue = await awa.testing.work_one(client, "q")  # the queue form: nothing left
    assert by_queue is None
