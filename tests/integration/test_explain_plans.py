"""explain is cheap: its statements read the jobs table only through index ranges.

Checked on the plans PostgreSQL actually chooses (EXPLAIN) for a table with a backlog
spread over several queues, running jobs and recent completions, after ANALYZE.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import awa
from awa.db import sql
from awa.explain.facts import AHEAD_CAP, MAX_PARTITIONS_SCANNED, RATE_SAMPLE, RATE_WINDOW_S
from awa.maintenance.control_stats import ControlStats
from tests.conftest import PgServer
from tests.helpers import SESSION, lead_maintenance

SEED = """
INSERT INTO awa.jobs (kind, queue, state, priority, run_at)
SELECT 'k', 'q' || (g % 10), 'available', 1 + g % 4, now() - g * interval '1 ms'
FROM generate_series(1, 12000) AS g;
INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, heartbeat_at)
SELECT 'k', 'q' || (g % 10), 'running', 1, now(), now() FROM generate_series(1, 600) AS g;
INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, finalized_at)
SELECT 'k', 'q' || (g % 10), 'completed', 1, now(), now() - g * interval '100 ms'
FROM generate_series(1, 6000) AS g;
-- A partitioned, rate-limited queue in the fleet pool: adopted and unadopted jobs.
INSERT INTO awa.queue_limits (queue, concurrency, rate_limit, partition_by)
VALUES ('p', 2, 5, 'customer');
INSERT INTO awa.fleet_pool (total) VALUES (10);
INSERT INTO awa.fleet_pool_members (queue, min_workers, weight) VALUES ('p', 1, 1);
INSERT INTO awa.jobs (kind, queue, state, args, partition_key, run_at)
SELECT 'k', 'p', 'available', jsonb_build_object('customer', 'c' || (g % 50)),
    CASE WHEN g % 4 > 0 THEN 'c' || (g % 50) END, now() - g * interval '1 ms'
FROM generate_series(1, 6000) AS g;
INSERT INTO awa.jobs (kind, queue, state, args, partition_key, attempt, attempted_at,
    heartbeat_at)
SELECT 'k', 'p', 'running', jsonb_build_object('customer', 'c' || g), 'c' || g, 1, now(),
    now()
FROM generate_series(1, 40) AS g;
-- Ordered jobs (ADR 0034): 20 keys, each with a running head and a backlog behind it.
INSERT INTO awa.jobs (kind, queue, state, ordering_key, attempt, attempted_at, heartbeat_at)
SELECT 'k', 'o', 'running', 'key' || g, 1, now(), now() FROM generate_series(1, 20) AS g;
INSERT INTO awa.jobs (kind, queue, state, ordering_key, run_at)
SELECT 'k', 'o', 'available', 'key' || (g % 20 + 1), now() - g * interval '1 ms'
FROM generate_series(1, 4000) AS g;
ANALYZE awa.jobs;
"""


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def plan_of(
    db: psycopg.Connection[Any], query: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    row = db.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchone()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(nodes(document[0]["Plan"]))


@pytest.fixture(scope="module")
def seeded(pg_server: PgServer, template_db: str) -> Iterator[psycopg.Connection[Any]]:
    """One seeded database for the module's tests (they only read it, but for the last,
    which analyzes its control tables as the leader would)."""
    name = f"awa_plans_{SESSION}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}" STRATEGY FILE_COPY')
    try:
        with psycopg.connect(pg_server.url_for(name), autocommit=True) as db:
            db.execute(SEED)
            yield db
    finally:
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _jobs_access(plan: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(node type, index) of every node that reads awa.jobs or one of its indexes."""
    return [
        (n["Node Type"], n.get("Index Name"))
        for n in plan
        if n.get("Relation Name") == "jobs" or str(n.get("Index Name", "")).startswith("jobs_")
    ]


def test_job_explain_reads_jobs_through_index_ranges_only(seeded: psycopg.Connection[Any]) -> None:
    (job_id,) = seeded.execute(
        "SELECT id FROM awa.jobs WHERE queue = 'q3' AND state = 'available' "
        "ORDER BY priority DESC, run_at DESC LIMIT 1"
    ).fetchone() or (None,)
    params = {
        "id": job_id,
        "ahead_cap": AHEAD_CAP,
        "rate_window_s": RATE_WINDOW_S,
        "rate_sample": RATE_SAMPLE,
    }
    access = _jobs_access(plan_of(seeded, sql.JOB_EXPLAIN, params))
    assert all(kind != "Seq Scan" for kind, _ in access), access
    used = {index for _, index in access}
    # The job by its key, the jobs ahead on the claim index, the running set on its own
    # index; the recent completions on either index that has finalized_at in order (the
    # planner picks by how many queues share the window).
    assert {"jobs_pkey", "jobs_claim_idx", "jobs_running_idx"} <= used, access
    assert used & {"jobs_finished_idx", "jobs_prune_completed_idx"}, access


def test_job_oldest_available_probes_the_claim_index(seeded: psycopg.Connection[Any]) -> None:
    params = {"queue": "q3", "max_keys": MAX_PARTITIONS_SCANNED}
    access = _jobs_access(plan_of(seeded, sql.JOB_OLDEST_AVAILABLE, params))
    assert access, "the plan reads awa.jobs"
    # available jobs sit in one of these
    halves = {"jobs_claim_idx", "jobs_partition_idx", "jobs_ordered_idx", "jobs_ordered_claim_idx"}
    # (a bitmap heap scan fetches the rows its bitmap index scan found)
    assert all(index in halves for kind, index in access if kind != "Bitmap Heap Scan"), access
    assert all(kind != "Seq Scan" for kind, _ in access), access
    assert "jobs_claim_idx" in {index for _, index in access}, access


def test_job_explain_of_a_partitioned_pooled_job_stays_on_indexes(
    seeded: psycopg.Connection[Any],
) -> None:
    (job_id,) = seeded.execute(
        "SELECT id FROM awa.jobs WHERE queue = 'p' AND state = 'available' "
        "AND partition_key = 'c7' ORDER BY run_at DESC LIMIT 1"
    ).fetchone() or (None,)
    params = {
        "id": job_id,
        "ahead_cap": AHEAD_CAP,
        "rate_window_s": RATE_WINDOW_S,
        "rate_sample": RATE_SAMPLE,
    }
    access = _jobs_access(plan_of(seeded, sql.JOB_EXPLAIN, params))
    assert all(kind != "Seq Scan" for kind, _ in access), access
    assert {"jobs_partition_idx", "jobs_claim_idx"} <= {index for _, index in access}, access
    params = {"queue": "p", "max_keys": MAX_PARTITIONS_SCANNED}
    access = _jobs_access(plan_of(seeded, sql.JOB_OLDEST_AVAILABLE, params))
    assert all(kind != "Seq Scan" for kind, _ in access), access
    assert "jobs_partition_idx" in {index for _, index in access}, access


def test_job_explain_of_an_ordered_job_reads_its_key_on_indexes(
    seeded: psycopg.Connection[Any],
) -> None:
    (job_id,) = seeded.execute(
        "SELECT max(id) FROM awa.jobs WHERE queue = 'o' AND state = 'available'"
    ).fetchone() or (None,)
    params = {
        "id": job_id,
        "ahead_cap": AHEAD_CAP,
        "rate_window_s": RATE_WINDOW_S,
        "rate_sample": RATE_SAMPLE,
    }
    access = _jobs_access(plan_of(seeded, sql.JOB_EXPLAIN, params))
    assert all(kind != "Seq Scan" for kind, _ in access), access
    used = {index for _, index in access}
    assert {"jobs_ordering_idx", "jobs_ordering_held_idx"} <= used, access
    params = {"queue": "o", "max_keys": MAX_PARTITIONS_SCANNED}
    access = _jobs_access(plan_of(seeded, sql.JOB_OLDEST_AVAILABLE, params))
    assert all(kind != "Seq Scan" for kind, _ in access), access


def test_the_idle_probe_finds_ordered_jobs_on_their_own_index(
    seeded: psycopg.Connection[Any],
) -> None:
    access = _jobs_access(
        plan_of(seeded, sql.QUEUE_PROBE_AVAILABLE, {"queues": ["q1", "o", "p", "none"]})
    )
    assert {"jobs_ordered_idx", "jobs_ordered_claim_idx"} & {index for _, index in access}, access


def test_the_idle_probe_never_scans_the_table(seeded: psycopg.Connection[Any]) -> None:
    """Most rows here are available: as EXISTS, the probe of a queue with none was a
    sequential scan of the whole table per idle queue (ADR 0040)."""
    access = _jobs_access(
        plan_of(seeded, sql.QUEUE_PROBE_AVAILABLE, {"queues": ["q1", "o", "p", "none"]})
    )
    assert access, "the plan reads awa.jobs"
    assert all(kind != "Seq Scan" for kind, _ in access), access
    assert "jobs_claim_idx" in {index for _, index in access}, access


@pytest.mark.parametrize(
    ("query", "params"),
    [
        (sql.JOB_PRUNE_FINALIZED,
         {"completed_retention_ms": 0, "failed_retention_ms": 0, "limit": 5000, "epoch": 0}),
        (sql.DLQ_PRUNE, {"retention_ms": 0, "limit": 5000, "epoch": 0}),
    ],
    ids=["jobs", "dlq"],
)  # fmt: skip
def test_a_retention_batch_deletes_its_rows_by_key_not_by_a_join_over_the_table(
    seeded: psycopg.Connection[Any], query: str, params: dict[str, Any]
) -> None:
    plan = plan_of(seeded, query, params)
    joins = [n["Node Type"] for n in plan if "Join" in n["Node Type"]]
    assert joins == [], joins  # a hash semi-join scanned the whole table once per batch
    if query is sql.JOB_PRUNE_FINALIZED:  # (the seeded DLQ is empty: any plan reads it)
        assert "jobs_pkey" in {n.get("Index Name") for n in plan}, plan


DAY_MS = 86_400_000


def test_retention_reads_only_what_it_deletes(seeded: psycopg.Connection[Any]) -> None:
    """With the default retentions, failed jobs between one and seven days old are the
    steady state, all under the completed bound. Over one index of every finished row
    the prune read them all every minute to delete none — past a few million rows, by
    scanning the whole table (a review: 668 ms at 2.6 million). Each retention now reads
    its own index in finalized_at order and stops where its rows end."""
    failed = (
        "INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, finalized_at) "
        "SELECT 'k', 'q' || (g % 10), 'failed', 1, now(), "
        "now() - interval '1 day' - g * interval '20 s' FROM generate_series(1, 20000) AS g"
    )
    with seeded.transaction(force_rollback=True):  # (its statistics and lease too)
        seeded.execute(failed)
        seeded.execute("ANALYZE awa.jobs")
        params = {"completed_retention_ms": DAY_MS, "failed_retention_ms": 7 * DAY_MS,
                  "limit": 5000, "epoch": lead_maintenance(seeded)}  # fmt: skip
        row = seeded.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {sql.JOB_PRUNE_FINALIZED}", params
        ).fetchone()
    assert row is not None
    plan = list(nodes(row[0][0]["Plan"]))
    read = sum(
        n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)
        for n in plan
        if n.get("Relation Name") == "jobs" or str(n.get("Index Name", "")).startswith("jobs_")
    )
    assert read == 0, [(n["Node Type"], n.get("Index Name"), n.get("Actual Rows")) for n in plan]


JIT_ABOVE_COST = 100_000  # PostgreSQL's default jit_above_cost


def _total_cost(db: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> float:
    row = db.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchone()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return float(document[0]["Plan"]["Total Cost"])


def _control_costs(db: psycopg.Connection[Any]) -> tuple[float, float]:
    (job_id,) = db.execute(
        "SELECT id FROM awa.jobs WHERE queue = 'q3' AND state = 'available' LIMIT 1"
    ).fetchone() or (None,)
    explain = {"id": job_id, "ahead_cap": AHEAD_CAP, "rate_window_s": RATE_WINDOW_S,
               "rate_sample": RATE_SAMPLE}  # fmt: skip
    control = {"queues": [f"q{i}" for i in range(10)] + ["p", "o"]}
    return (
        _total_cost(db, sql.JOB_EXPLAIN, explain),
        _total_cost(db, sql.QUEUE_CONTROL_LIST, control),
    )


async def test_control_statements_are_priced_below_jit_once_the_leader_looked(
    seeded: psycopg.Connection[Any],
) -> None:
    """Planned from the statistics of a control table never analyzed (or analyzed empty,
    then given a few rows: the seed's limits and pool), job_explain and every worker's
    control refresh were priced past jit_above_cost, and JIT compiling made each take a
    second instead of a millisecond (a review on 3 million jobs). The leader analyzes
    the control tables when they changed (migration 0034 once at the upgrade)."""
    assert max(_control_costs(seeded)) > JIT_ABOVE_COST  # as the seed left them
    client = awa.AsyncClient(seeded.info.dsn)
    try:
        stats = ControlStats(await client._get_pool())
        assert await stats.tick() is True
        assert await stats.tick() is False  # nothing changed since
    finally:
        await client.close()
    assert max(_control_costs(seeded)) < JIT_ABOVE_COST
