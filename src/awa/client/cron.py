"""Operator actions on periodic schedules. Each takes a connection and is one statement."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from awa import validate
from awa.client.insert import InsertSpec
from awa.cronexpr import CronExpression
from awa.db import sql
from awa.db.errors import mapped
from awa.db.rows import job_rows
from awa.errors import ScheduleNotFound
from awa.periodic import CronSchedule, PeriodicJob, check_name, check_policy
from awa.types import Job


def build(
    name: str, cron_expr: str, timezone: str, missed_fire_policy: str, spec: InsertSpec
) -> PeriodicJob:
    """A validated definition; every error names its field."""
    return PeriodicJob(
        name=check_name(name),
        expression=CronExpression.parse(cron_expr, timezone),
        kind=spec.kind,
        queue=spec.queue,
        # As encoded for an insert: dataclasses, enums or models nested in dict args are
        # stored as the jobs they enqueue will be (the definition is stored as JSON at start).
        args=json.loads(spec.args_json),
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        tags=tuple(spec.tags),
        metadata=json.loads(spec.metadata_json),
        missed_fire_policy=check_policy(missed_fire_policy),
    )


async def _rows(
    conn: AsyncConnection[Any], query: LiteralString, params: Mapping[str, Any]
) -> list[dict[str, Any]]:
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(query, params)
        return await cur.fetchall()


async def list_schedules(conn: AsyncConnection[Any]) -> list[CronSchedule]:
    """Every stored schedule, by name."""
    return [
        CronSchedule.from_row(r) for r in await _rows(conn, sql.CRON_SCHEDULE_LIST, {"name": None})
    ]


async def _one(conn: AsyncConnection[Any], query: LiteralString, name: str) -> dict[str, Any]:
    rows = await _rows(conn, query, {"name": validate.text("name", name)})
    if not rows:
        raise ScheduleNotFound(name)
    return rows[0]


async def pause(conn: AsyncConnection[Any], name: str) -> CronSchedule:
    """Stop firing ``name`` until resumed."""
    return CronSchedule.from_row(await _one(conn, sql.CRON_SCHEDULE_PAUSE, name))


async def resume(conn: AsyncConnection[Any], name: str) -> CronSchedule:
    """Fire ``name`` again from now on (fires missed while paused are skipped)."""
    return CronSchedule.from_row(await _one(conn, sql.CRON_SCHEDULE_RESUME, name))


async def remove(conn: AsyncConnection[Any], name: str) -> None:
    """Delete ``name``'s row (a worker registering it in code re-creates it at start)."""
    await _one(conn, sql.CRON_SCHEDULE_DELETE, name)


async def trigger(conn: AsyncConnection[Any], name: str) -> Job[Any]:
    """Enqueue one job of ``name`` now; its timetable is unchanged."""
    with mapped():
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(sql.CRON_SCHEDULE_TRIGGER, {"name": validate.text("name", name)})
        job = await cur.fetchone()
    if job is None:
        raise ScheduleNotFound(name)
    return job


def check_unique(existing: Sequence[PeriodicJob], name: str) -> None:
    """Refuse a second registration under the same name."""
    from awa.errors import ValidationError

    if any(job.name == name for job in existing):
        raise ValidationError("name", f"a periodic job named {name!r} is already registered")
