"""Finished jobs are counted as they change (migration 0038, ADR 0054): whatever path
moves a job into or out of completed, failed or cancelled, ``queue_stats()`` answers what
a count of the table would, before and after the leader folds the changes, without
reading the finished jobs."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import awa
from awa.db import sql
from tests.helpers import (
    FAST_WORKER,
    lead_maintenance,
    statements_running,
    stop_migrations_before,
    wait_for,
)

TRUTH = """
SELECT queue::text,
    count(*) FILTER (WHERE state = 'completed'),
    count(*) FILTER (WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'),
    count(*) FILTER (WHERE state = 'completed' AND finalized_at > now() - interval '1 minute'),
    count(*) FILTER (WHERE state = 'failed'),
    count(*) FILTER (WHERE state = 'cancelled')
FROM awa.jobs WHERE state IN ('completed', 'failed', 'cancelled')
GROUP BY 1 ORDER BY 1
"""


def _truth(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """The counts a read of every finished job gives (what queue_stats did before 0038)."""
    db.commit()
    return [tuple(row) for row in db.execute(TRUTH).fetchall()]


async def _counted(client: awa.AsyncClient) -> list[tuple[Any, ...]]:
    return [
        (s.queue, s.completed, s.completed_last_hour, s.completed_last_minute, s.failed,
         s.cancelled)
        for s in await client.queue_stats()
        if s.completed or s.failed or s.cancelled
    ]  # fmt: skip


def _fold(db: psycopg.Connection[Any]) -> int:
    row = db.execute(sql.FINISHED_COUNTS_FOLD).fetchone()
    db.commit()
    assert row is not None
    return int(row[0])


async def _agree(client: awa.AsyncClient, db: psycopg.Connection[Any]) -> None:
    """The kept counts equal the table's, with the changes pending and once folded."""
    truth = _truth(db)
    assert await _counted(client) == truth
    _fold(db)
    assert await _counted(client) == truth
    assert db.execute("SELECT count(*) FROM awa.finished_count_changes").fetchone() == (0,)


def _register(client: awa.AsyncClient) -> None:
    async def handler(job: awa.Job[Any]) -> Any:
        mode = job.args["mode"]
        if mode == "fail":
            raise ValueError("broken")
        if mode == "cancel":
            return awa.Cancel("not needed")
        return None

    client.task(None, kind="work", queue="q")(handler)
    client.task(None, kind="work_r", queue="r")(handler)


async def _finished(client: awa.AsyncClient, ids: list[int]) -> None:
    finished = {awa.JobState.COMPLETED, awa.JobState.FAILED, awa.JobState.CANCELLED}

    async def all_finished() -> bool:
        return all([(await client.get_job(i)).state in finished for i in ids])

    await wait_for(all_finished)


async def test_every_path_keeps_the_counts_of_the_table(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    _register(client)
    modes = ["ok"] * 6 + ["fail"] * 4 + ["cancel"] * 3
    jobs = [
        *await client.insert_many([{"mode": m} for m in modes], kind="work", queue="q",
                                  max_attempts=1),
        *await client.insert_many([{"mode": "ok"}] * 5, kind="work_r", queue="r"),
    ]  # fmt: skip
    await client.start([("q", 4), ("r", 2)], **FAST_WORKER)
    try:
        await _finished(client, [j.id for j in jobs])
    finally:
        await client.shutdown()
    assert _truth(db) == [("q", 6, 6, 6, 4, 3), ("r", 5, 5, 5, 0, 0)]
    await _agree(client, db)

    assert len(await client.retry_failed(queue="q")) == 4  # failed → available
    await _agree(client, db)
    waiting = await client.insert_many([{"mode": "ok"}] * 3, kind="work", queue="q")
    await client.cancel(waiting[0].id)  # available → cancelled
    await _agree(client, db)
    cancelled = [j.id for j in jobs[10:13]]
    await client.retry(cancelled[0])  # cancelled → available
    await _agree(client, db)
    assert await client.drain_queue("q") >= 3  # the waiting ones → cancelled
    await _agree(client, db)

    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE queue = 'r' AND id % 2 = 0")
    db.execute(  # moved between buckets: two hours back
        "UPDATE awa.jobs SET finalized_at = finalized_at - interval '2 hours' "
        "WHERE queue = 'q' AND state = 'completed' AND id % 2 = 1"
    )
    await _agree(client, db)
    failed_r = sum(1 for j in jobs[13:] if j.id % 2 == 0)
    assert await client.discard_failed("work_r") == failed_r > 0
    await _agree(client, db)
    db.execute("DELETE FROM awa.jobs WHERE id = %s", (jobs[0].id,))
    db.execute(  # by hand, as a finished job: counted by the insert trigger
        "INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, finalized_at) "
        "VALUES ('work', 'new', 'completed', 1, now(), now())"
    )
    await _agree(client, db)

    epoch = lead_maintenance(db)
    db.execute(  # retention: what is older than an hour goes
        sql.JOB_PRUNE_FINALIZED,
        {"completed_retention_ms": 3_600_000, "failed_retention_ms": 3_600_000,
         "limit": 1_000, "epoch": epoch},
    )  # fmt: skip
    await _agree(client, db)

    db.execute("TRUNCATE awa.jobs")
    db.commit()
    assert await _counted(client) == []
    assert db.execute("SELECT count(*) FROM awa.finished_counts").fetchone() == (0,)


async def test_a_failed_job_moved_to_the_dlq_leaves_the_counts(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """The DLQ move deletes the failed row inside the statement that failed it."""
    await client.insert_many([{"i": i} for i in range(4)], kind="k", queue="q")
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', attempt = 1, attempted_at = now(), "
        "finalized_at = now()"
    )
    await _agree(client, db)
    assert await client.move_failed_to_dlq(queue="q") == 4
    await _agree(client, db)
    assert await _counted(client) == []


async def test_a_worker_failing_jobs_into_the_dlq_counts_none_failed(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """The worker counts its own outcomes; the DLQ move, a trigger inside that same
    statement, takes them out again (counted by the delete)."""
    _register(client)
    jobs = await client.insert_many(
        [{"mode": m} for m in ["ok", "fail", "fail", "cancel"]],
        kind="work",
        queue="q",
        max_attempts=1,
    )
    await client.start([awa.QueueConfig("q", max_workers=2, dlq=True)], **FAST_WORKER)
    try:

        async def dead_lettered() -> bool:
            return await client.dlq_depth_by_queue() == {"q": 2}

        await wait_for(dead_lettered)
        await _finished(client, [jobs[0].id, jobs[3].id])
    finally:
        await client.shutdown()
    assert _truth(db) == [("q", 1, 1, 1, 0, 1)]
    await _agree(client, db)


async def test_aged_buckets_coarsen_and_the_windows_hold(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A fold keeps a second's bucket for 2 minutes, a minute's for 2 hours, then an
    hour's; the totals and both windows are the same before and after."""
    await client.insert_many([{"i": i} for i in range(60)], kind="k", queue="q")
    db.execute(  # one job every 10 minutes back to ~10 hours, from 30 s ago
        "UPDATE awa.jobs SET state = 'completed', attempt = 1, attempted_at = now(), "
        "finalized_at = now() - interval '30 seconds' "
        "- (id - (SELECT min(id) FROM awa.jobs)) * interval '10 minutes 7 seconds'"
    )
    db.commit()
    assert _fold(db) > 0
    truth = _truth(db)
    assert truth == [("q", 60, 6, 1, 0, 0)]
    assert await _counted(client) == truth
    buckets = db.execute(
        "SELECT date_trunc('hour', at, 'UTC') = at, date_trunc('minute', at, 'UTC') = at, "
        "CASE WHEN at >= now() - interval '2 minutes' THEN 'recent' "
        "WHEN at >= now() - interval '2 hours' THEN 'hours' ELSE 'old' END "
        "FROM awa.finished_counts"
    ).fetchall()
    assert len(buckets) < 60  # the old ones share hours
    for on_hour, on_minute, age in buckets:
        assert on_hour if age == "old" else (on_minute or age == "recent")


async def test_a_fold_leaves_what_is_not_committed(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A fold beside a transaction that finished jobs: the changes it cannot see are
    neither folded nor lost; a second fold at the same time waits for the first and then
    counts nothing twice."""
    await client.insert_many([{"i": i} for i in range(10)], kind="k", queue="q")
    with psycopg.connect(database_url) as open_tx, psycopg.connect(database_url) as other:
        open_tx.execute(
            "UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() "
            "WHERE id IN (SELECT id FROM awa.jobs ORDER BY id LIMIT 6)"
        )
        db.execute(
            "UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() "
            "WHERE id IN (SELECT id FROM awa.jobs ORDER BY id DESC LIMIT 4)"
        )
        db.commit()
        assert other.execute(sql.FINISHED_COUNTS_FOLD).fetchone() == (4,)  # not committed
        second = asyncio.create_task(asyncio.to_thread(_fold, db))
        with psycopg.connect(database_url, autocommit=True) as watch:
            await wait_for(
                lambda: statements_running(watch, "-- finished_counts_fold", on_a_lock=True)
            )
        other.commit()
        assert await second == 0
        assert await _counted(client) == [("q", 0, 0, 0, 0, 4)]
        open_tx.commit()
    assert await _counted(client) == [("q", 0, 0, 0, 0, 10)]
    assert _fold(db) == 6
    assert await _counted(client) == [("q", 0, 0, 0, 0, 10)]


async def test_the_leader_folds(client: awa.AsyncClient, db: psycopg.Connection[Any]) -> None:
    _register(client)
    jobs = await client.insert_many([{"mode": "ok"}] * 20, kind="work", queue="q")
    await client.start([("q", 4)], **FAST_WORKER)
    try:
        await _finished(client, [j.id for j in jobs])

        async def folded() -> bool:
            db.commit()
            row = db.execute("SELECT count(*) FROM awa.finished_count_changes").fetchone()
            return row == (0,)

        await wait_for(folded)
        assert db.execute("SELECT sum(n) FROM awa.finished_counts").fetchone() == (20,)
    finally:
        await client.shutdown()


async def test_the_upgrade_counts_the_jobs_finished_before_it(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    go_on = stop_migrations_before(monkeypatch, 38)
    async with awa.AsyncClient(empty_database_url) as client:
        await client.migrate()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, finalized_at)"
            " SELECT 'k', 'q' || g % 2, (ARRAY['completed', 'failed', 'cancelled'])[g % 3 + 1]"
            "::awa.job_state, 1, now(), now() - g * interval '1 minute'"
            " FROM generate_series(1, 90) AS g"
        )
    pending = go_on()
    async with awa.AsyncClient(empty_database_url) as client:
        assert await client.migrate() == pending
        with psycopg.connect(empty_database_url) as conn:
            truth = _truth(conn)
            assert await _counted(client) == truth
            conn.execute(sql.FINISHED_COUNTS_FOLD)
            conn.commit()
            assert await _counted(client) == truth
    assert truth == [("q0", 15, 9, 0, 15, 15), ("q1", 15, 10, 0, 15, 15)]


async def test_counts_hold_under_concurrent_completions_and_folds(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Writers finishing jobs from several connections while folds run: no change row is
    counted twice or dropped."""
    await client.insert_many([{"i": i} for i in range(400)], kind="k", queue="q")

    def finish(part: int) -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for lo in range(part * 100, part * 100 + 100, 10):
                conn.execute(
                    "UPDATE awa.jobs SET state = 'completed', attempt = 1, "
                    "attempted_at = now(), finalized_at = now() "
                    "WHERE id IN (SELECT id FROM awa.jobs ORDER BY id OFFSET %s LIMIT 10)",
                    (lo,),
                )

    def folds() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for _ in range(30):
                conn.execute(sql.FINISHED_COUNTS_FOLD)

    await asyncio.gather(*(asyncio.to_thread(finish, p) for p in range(4)),
                         asyncio.to_thread(folds), asyncio.to_thread(folds))  # fmt: skip
    assert _truth(db) == [("q", 400, 400, 400, 0, 0)]
    await _agree(client, db)


async def test_an_upgrade_under_repeatable_read_counts_what_committed_while_it_waited(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database whose default isolation is repeatable read: migrate() still reads the
    jobs after its locks (a review: 4 completions committed while 0038 waited for their
    writer were never counted, and pruning them later made the counts negative)."""
    go_on = stop_migrations_before(monkeypatch, 38)
    async with awa.AsyncClient(empty_database_url) as client:
        await client.migrate()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue) SELECT 'k', 'q' FROM generate_series(1, 10)"
        )
        dbname = conn.info.dbname
        conn.execute(
            f"ALTER DATABASE \"{dbname}\" SET default_transaction_isolation = 'repeatable read'"
        )
    pending = go_on()
    with psycopg.connect(empty_database_url) as writer:  # a worker of the release before
        writer.execute(
            "UPDATE awa.jobs SET state = 'completed', attempt = 1, attempted_at = now(), "
            "finalized_at = now() WHERE id IN (SELECT id FROM awa.jobs ORDER BY id LIMIT 4)"
        )
        async with awa.AsyncClient(empty_database_url) as client:
            upgrade = asyncio.create_task(client.migrate())
            with psycopg.connect(empty_database_url, autocommit=True) as watch:
                await wait_for(lambda: statements_running(watch, "-- 0038", on_a_lock=True))
            writer.commit()
            assert await upgrade == pending
            with psycopg.connect(empty_database_url) as conn:
                assert _truth(conn) == [("q", 4, 4, 4, 0, 0)]
                assert await _counted(client) == _truth(conn)


async def test_a_publication_of_all_tables_takes_the_upgrade_and_the_folds(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `CREATE PUBLICATION … FOR ALL TABLES` (CDC), a delete needs a replica
    identity: the changes table has one (a review: the upgrade failed on it, and later
    every fold)."""
    go_on = stop_migrations_before(monkeypatch, 38)
    async with awa.AsyncClient(empty_database_url) as client:
        await client.migrate()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION awa_test_cdc FOR ALL TABLES")
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, finalized_at) "
            "VALUES ('k', 'q', 'completed', 1, now(), now())"
        )
    pending = go_on()
    async with awa.AsyncClient(empty_database_url) as client:
        assert await client.migrate() == pending
        with psycopg.connect(empty_database_url) as conn:
            conn.execute("DELETE FROM awa.jobs")
            conn.commit()
            assert _fold(conn) == 1
            assert await _counted(client) == []


async def test_a_read_before_a_fold_gives_what_it_gives_after(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Jobs finished in the minute the hour's window starts in, folded into that minute's
    bucket, then some deleted: the pending -3 read by its second while the +5 sat in its
    minute took completed_last_hour to -3 (a review). Read in the bucket a fold puts them
    in, the counts are the same before the fold and after."""
    await client.insert_many([{"i": i} for i in range(5)], kind="k", queue="q")
    db.execute(  # the second after the window's start: its minute starts before it (59 in 60)
        "UPDATE awa.jobs SET state = 'completed', attempt = 1, attempted_at = now(), "
        "finalized_at = date_trunc('second', now() - interval '1 hour') + interval '1 second'"
    )
    db.commit()
    _fold(db)
    db.execute("DELETE FROM awa.jobs WHERE id IN (SELECT id FROM awa.jobs ORDER BY id LIMIT 3)")
    db.commit()
    before = await _counted(client)
    _fold(db)
    assert await _counted(client) == before
    [(_, completed, last_hour, last_minute, _, _)] = before
    assert (completed, last_minute) == (2, 0) and 0 <= last_hour <= 2
