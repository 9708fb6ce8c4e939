"""Every statement that changes several running jobs and may wait for them locks their rows
in id order (migration 0029), so no two of them deadlock. The completion locked in the
order its outcomes came in and the heartbeat in heap order: while something else held the
rows (a change of partition_by locks a queue's running jobs), both queued up, each took
its first row when the holder let go, and waited for the other's (8 deadlocks in 30 s of
a 64-handler drain with 200 ms heartbeats while partition_by changed)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from awa.db import sql
from tests.helpers import wait_for

Key = tuple[int, int, Any]  # (id, run_lease, attempted_at)


def _running_with_the_higher_id_first_in_the_heap(db: psycopg.Connection[Any]) -> list[Key]:
    """Two running jobs a < b whose running row versions lie b first in the table."""
    for priority in (2, 1):  # a, then b (ids in insert order)
        db.execute(
            "INSERT INTO awa.jobs (kind, queue, args, priority) VALUES ('k', 'q', '{}', %s)",
            (priority,),
        )
    for _ in range(2):  # b first (higher priority): its claimed version is written first
        db.execute("SELECT * FROM awa.claim('q', 1, 0, 'on')")
    rows = db.execute(
        "SELECT id, run_lease, attempted_at FROM awa.jobs WHERE state = 'running' ORDER BY ctid"
    ).fetchall()
    assert [row[0] for row in rows] == sorted((row[0] for row in rows), reverse=True)
    return sorted(rows)


def _key_params(keys: list[Key]) -> dict[str, Any]:
    return {
        "ids": [k[0] for k in keys],
        "run_leases": [k[1] for k in keys],
        "attempted_ats": [k[2] for k in keys],
    }


def _completion(keys: list[Key]) -> dict[str, Any]:
    outcomes = [
        {"id": i, "run_lease": lease, "attempted_at": at.isoformat(), "state": "completed",
         "delay_ms": None, "refund": False, "error": None}
        for i, lease, at in keys
    ]  # fmt: skip
    return {"outcomes": json.dumps(outcomes), "synchronous_commit": "on", "claims": None}


def _writer(name: str, keys: list[Key]) -> tuple[str, dict[str, Any]]:
    if name == "heartbeat":
        return sql.JOB_HEARTBEAT_MANY, {**_key_params(keys), "synchronous_commit": "on"}
    if name == "progress":
        params = {**_key_params(keys), "progress": [Jsonb({"p": 1})] * 2, "metadata": [None] * 2}
        return sql.JOB_PROGRESS_MANY, params
    if name == "fence":
        return sql.JOB_FENCE_ATTEMPTS, {**_key_params(keys), "reason": "shutting down"}
    if name == "completion":
        return sql.JOB_FINALIZE_MANY, _completion(keys)
    return sql.JOB_FINALIZE_MANY, _completion(keys[::-1])  # outcomes in reverse id order


# What each leaves the two jobs in.
WRITERS = {
    "heartbeat": "running",
    "progress": "running",
    "fence": "retryable",
    "completion": "completed",
    "completion, outcomes reversed": "completed",
}


@pytest.mark.parametrize("writer", list(WRITERS))
async def test_a_writer_of_several_running_jobs_locks_them_in_id_order(
    writer: str, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Blocked on the lowest id, the writer holds none of the others: that order, shared by
    every such writer, is what keeps any two from each waiting for the other."""
    keys = _running_with_the_higher_id_first_in_the_heap(db)
    lowest, highest = keys[0][0], keys[-1][0]
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn,
    ):
        await holder.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE", (lowest,))
        write = asyncio.create_task(conn.execute(*_writer(writer, keys)))

        async def waits_for_a_row() -> bool:
            if write.done():  # failed at once: awaiting it below raises
                return True
            row = db.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                (conn.info.backend_pid,),
            ).fetchone()
            return row is not None and row[0] == "Lock"

        try:
            await wait_for(waits_for_a_row)
            # NOWAIT: refused at once if the writer locked the higher id before the lowest.
            db.execute("SELECT id FROM awa.jobs WHERE id = %s FOR UPDATE NOWAIT", (highest,))
        finally:
            await holder.rollback()
            await asyncio.wait_for(write, timeout=30)
        rows = await write.result().fetchall()
    assert sorted(row[0] for row in rows) == [lowest, highest]  # both written
    states = {row[0] for row in db.execute("SELECT state::text FROM awa.jobs")}
    assert states == {WRITERS[writer]}
