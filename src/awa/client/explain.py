"""The reads behind ``client.explain``: two statements, then pure reasoning.

``job_explain`` brings the job (from ``awa.jobs`` or the dead letter queue) with its
queue's pause row and bounded counts; ``runtime_instance_list`` brings the snapshots the
live workers published. :mod:`awa.explain` turns them into reasons.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa import validate
from awa.client import admin
from awa.config import LIVE_WITHIN_MS
from awa.db import sql
from awa.db.errors import mapped
from awa.db.rows import job_from_row
from awa.errors import JobNotFound
from awa.explain import explain as reason_about
from awa.explain.facts import (
    AHEAD_CAP,
    MAX_PARTITIONS_SCANNED,
    RATE_SAMPLE,
    RATE_WINDOW_S,
    Facts,
    FleetFacts,
    KeyJob,
    OrderingFacts,
    QueueFacts,
)
from awa.types import Explanation


async def explain(conn: AsyncConnection[Any], job_id: int) -> Explanation:
    """Why job ``job_id`` is where it is; JobNotFound when no job (nor dead letter) has it."""
    job_id = validate.integer("id", job_id, low=1)
    params = {
        "id": job_id,
        "ahead_cap": AHEAD_CAP,
        "rate_window_s": RATE_WINDOW_S,
        "rate_sample": RATE_SAMPLE,
    }
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.JOB_EXPLAIN, params)
        row = await cur.fetchone()
    if row is None:
        raise JobNotFound(job_id)
    live = await admin.list_runtime_instances(conn, fresh_ms=LIVE_WITHIN_MS)
    return reason_about(_facts(row, tuple(live)))


async def oldest_available(conn: AsyncConnection[Any], queue: str) -> int | None:
    """The id of ``queue``'s available job that has waited longest, if any."""
    with mapped():
        params = {"queue": validate.text("queue", queue), "max_keys": MAX_PARTITIONS_SCANNED}
        cur = await conn.execute(sql.JOB_OLDEST_AVAILABLE, params)
        row = await cur.fetchone()
    return None if row is None else int(row[0])


def _facts(row: dict[str, Any], live: tuple[Any, ...]) -> Facts:
    return Facts(
        job=job_from_row(row),
        now=row["db_now"],
        heartbeat_at=row["heartbeat_at"],
        callback_timeout_at=row["callback_timeout_at"],
        dead_lettered_at=row["dead_lettered_at"],
        queue=QueueFacts(
            name=row["queue"],
            paused=row["paused"],
            paused_at=row["paused_at"],
            paused_by=row["paused_by"],
            ahead=row["ahead"] or 0,
            running=row["queue_running"] or 0,
            completed_recently=row["completed_recently"] or 0,
            completed_since=row["completed_since"],
            completed_in_partition=None if row["part"] is None else row["completed_in_partition"],
            running_jobs=tuple(
                zip(
                    row["running_ids"] or (),
                    row["running_claimed"] or (),
                    row["running_parts"] or (),
                    strict=True,
                )
            ),
        ),
        live=live,
        fleet=FleetFacts(
            concurrency=row["concurrency"],
            rate_limit=row["fleet_rate"],
            burst=row["fleet_burst"],
            partition_by=row["partition_by"],
            partition=row["part"],
            partition_running=row["part_running"] or 0,
            tokens=None if row["fleet_tokens"] is None else float(row["fleet_tokens"]),
            updated_at=row["limits_updated_at"],
            pool_total=row["pool_total"],
            pool_min_workers=row["pool_min_workers"],
            pool_weight=row["pool_weight"],
            pool_room=row["pool_room"],
            pool_running=row["pool_running"] or 0,
        ),
        ordering=_ordering(row),
        callback_id=None if row["callback_id"] is None else str(row["callback_id"]),
    )


def _key_job(row: dict[str, Any], prefix: str) -> KeyJob | None:
    job_id = row[f"{prefix}_id"]
    if job_id is None:
        return None
    return KeyJob(job_id, str(row[f"{prefix}_state"]), row[f"{prefix}_queue"])


def _ordering(row: dict[str, Any]) -> OrderingFacts | None:
    key = row["ordering_key"]
    if key is None:
        return None
    return OrderingFacts(
        key=key,
        ahead=row["key_ahead"] or 0,
        first=_key_job(row, "key_first"),
        started=_key_job(row, "key_held"),
    )
