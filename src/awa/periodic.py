"""Periodic (cron) jobs: what ``client.periodic(...)`` registers and what ``list_cron`` shows.

A :class:`PeriodicJob` is a validated definition held by the client; workers store their
definitions in ``awa.cron_schedules`` at start, and the maintenance leader fires them
(:mod:`awa.maintenance.cron`). A :class:`CronSchedule` is a stored row, as seen by
operators. Both are I/O-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from awa import validate
from awa.cronexpr import CronExpression
from awa.errors import ValidationError

MISSED_FIRE_POLICIES = ("coalesce", "catch_up")


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    """One registered schedule: the job it enqueues and when.

    ``missed_fire_policy``: for fires no tick was there for (downtime, before a new
    leader's first tick, a stalled leader), ``"coalesce"`` enqueues one job for the
    latest; ``"catch_up"`` one per missed fire, oldest first.
    """

    name: str
    expression: CronExpression
    kind: str
    queue: str
    args: dict[str, Any]
    priority: int
    max_attempts: int
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    missed_fire_policy: str

    @property
    def cron_expr(self) -> str:
        """The cron expression as given."""
        return self.expression.expression

    @property
    def timezone(self) -> str:
        """The IANA time zone the expression is evaluated in."""
        return self.expression.timezone

    def row(self) -> dict[str, Any]:
        """This definition as an element of ``cron_schedule_upsert``'s JSON array."""
        return {
            "name": self.name,
            "cron_expr": self.cron_expr,
            "timezone": self.timezone,
            "kind": self.kind,
            "queue": self.queue,
            "args": self.args,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "tags": list(self.tags),
            "metadata": self.metadata,
            "missed_fire_policy": self.missed_fire_policy,
        }


def definitions_json(jobs: list[PeriodicJob]) -> str:
    """The parameter of ``cron_schedule_upsert``."""
    return json.dumps([job.row() for job in jobs], separators=(",", ":"))


def check_policy(value: Any) -> str:
    """A valid missed-fire policy, or ValidationError naming the field."""
    if value not in MISSED_FIRE_POLICIES:
        raise ValidationError(
            "missed_fire_policy", f"must be 'coalesce' or 'catch_up', got {value!r}"
        )
    return str(value)


def check_name(value: Any) -> str:
    """A valid schedule name."""
    return validate.name("name", value)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A schedule as stored in ``awa.cron_schedules`` (``next_fire_at`` computed)."""

    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    args: dict[str, Any]
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    missed_fire_policy: str
    paused: bool
    last_fire_at: datetime | None
    next_fire_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any], now: datetime | None = None) -> CronSchedule:
        """A ``cron_schedules`` row; the next fire is computed from the expression, after
        ``now``: the row's ``db_now`` (the database's clock) when it has one."""
        if now is None and row.get("db_now") is not None:
            now = row["db_now"].astimezone(UTC)  # UTC: see CronService.tick
        next_fire: datetime | None = None
        if not row["paused"]:
            base = row["last_fire_at"] or row["created_at"]
            try:
                expr = CronExpression.parse(row["cron_expr"], row["timezone"])
                next_fire = expr.next_after(max(base, now or datetime.now(UTC)))
            except ValidationError:
                next_fire = None  # stored by a newer awa with syntax this one lacks
        return cls(
            name=row["name"],
            cron_expr=row["cron_expr"],
            timezone=row["timezone"],
            kind=row["kind"],
            queue=row["queue"],
            args=row["args"],
            priority=row["priority"],
            max_attempts=row["max_attempts"],
            tags=list(row["tags"]),
            metadata=row["metadata"],
            missed_fire_policy=row["missed_fire_policy"],
            paused=row["paused"],
            last_fire_at=row["last_fire_at"],
            next_fire_at=next_fire,
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


__all__ = ["CronSchedule", "PeriodicJob"]
