"""The leader vacuums awa.jobs once dead rows pile up (ADR 0041), read from the server's
own statistics: ``vacuum_count`` counts the VACUUMs PostgreSQL actually ran."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool

import awa
from awa.maintenance.vacuum import JobsVacuum
from tests.helpers import FAST_WORKER, wait_for

STATS = (
    "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relid = 'awa.jobs'::regclass"
)


def _stats(db: psycopg.Connection[Any]) -> tuple[int, int]:
    row = db.execute(STATS).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.fixture
def no_autovacuum(db: psycopg.Connection[Any]) -> None:
    # Autovacuum would reset the dead-row count and hold the leader off for a while.
    db.execute("ALTER TABLE awa.jobs SET (autovacuum_enabled = false)")


@pytest.mark.usefixtures("no_autovacuum")
async def test_the_leader_vacuums_the_jobs_table_once_dead_rows_pass_the_threshold(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    await client.insert_many([{}] * 300, kind="k", queue="q")
    assert _stats(db)[1] == 0
    await client.start([("q", 8)], vacuum_dead_rows=200, **FAST_WORKER)
    try:
        # Each job claimed and completed leaves dead versions behind: 600 for 300 jobs.
        async def vacuumed() -> bool:
            return _stats(db)[1] >= 1

        await wait_for(vacuumed, timeout=30)
        vacuum = client._worker.vacuum

        async def counted() -> bool:  # its reply may still be on its way to the leader
            return vacuum.vacuums >= 1

        await wait_for(counted)
        assert vacuum.refused is None
        count = db.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
        assert count == (300,)
    finally:
        await client.shutdown()


@pytest.mark.usefixtures("no_autovacuum")
async def test_below_the_threshold_or_switched_off_nothing_is_vacuumed(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("INSERT INTO awa.jobs (kind, queue) SELECT 'k', 'q' FROM generate_series(1, 50)")
    db.execute("UPDATE awa.jobs SET priority = 1")  # 50 dead versions

    async def counted() -> bool:  # the writer's statistics reach the shared counters
        return _stats(db)[0] >= 50

    await wait_for(counted)
    async with AsyncConnectionPool(database_url, kwargs={"autocommit": True}) as pool:
        assert await JobsVacuum(pool, dead_rows=51).tick() is False
        assert await JobsVacuum(pool, dead_rows=0).tick() is False
        assert _stats(db)[1] == 0
        assert await JobsVacuum(pool, dead_rows=50).tick() is True
    assert _stats(db)[1] == 1


@pytest.mark.usefixtures("no_autovacuum")
async def test_a_role_that_may_not_vacuum_is_told_once_and_left_alone(
    database_url: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    dbname = conninfo.conninfo_to_dict(database_url)["dbname"]
    role = f"awa_novacuum_{dbname}"
    db.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'novacuum'")
    db.execute(f'GRANT USAGE ON SCHEMA awa TO "{role}"')
    try:
        db.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q')")
        db.execute("UPDATE awa.jobs SET priority = 1")

        async def counted() -> bool:
            return _stats(db)[0] >= 1

        await wait_for(counted)
        url = conninfo.make_conninfo(database_url, user=role, password="novacuum")
        async with AsyncConnectionPool(url, kwargs={"autocommit": True}) as pool:
            vacuum = JobsVacuum(pool, dead_rows=1)
            with caplog.at_level(logging.WARNING, logger="awa"):
                assert await vacuum.tick() is False
                assert await vacuum.tick() is False  # not tried again
            assert vacuum.refused is not None and not vacuum.enabled
            assert vacuum.refused != "refused"  # PostgreSQL's own reason, read in time
        said = [r for r in caplog.records if getattr(r, "event", None) == "jobs_vacuum_refused"]
        assert len(said) == 1
        assert _stats(db)[1] == 0
    finally:
        db.execute(f'REVOKE USAGE ON SCHEMA awa FROM "{role}"')
        db.execute(f'DROP ROLE "{role}"')


@pytest.mark.usefixtures("no_autovacuum")
async def test_a_vacuum_skipped_because_another_runs_is_tried_again(
    database_url: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A vacuum skipped because another one held the table (autovacuum, or a killed
    leader's still running) was taken for a refusal: the warning told the operator to
    change the role, and the worker never vacuumed again (a review: psycopg's notice was
    read after it had become invalid)."""
    db.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('k', 'q')")
    db.execute("UPDATE awa.jobs SET priority = 1")

    async def counted() -> bool:
        return _stats(db)[0] >= 1

    await wait_for(counted)
    async with AsyncConnectionPool(database_url, kwargs={"autocommit": True}) as pool:
        vacuum = JobsVacuum(pool, dead_rows=1)
        with psycopg.connect(database_url) as other:  # what a running vacuum holds
            other.execute("LOCK TABLE awa.jobs IN SHARE UPDATE EXCLUSIVE MODE")
            with caplog.at_level(logging.WARNING, logger="awa"):
                assert await vacuum.tick() is False  # skipped
            assert vacuum.refused is None and vacuum.enabled
        assert await vacuum.tick() is True  # and done once the other is gone
    assert not [r for r in caplog.records if getattr(r, "event", None) == "jobs_vacuum_refused"]
