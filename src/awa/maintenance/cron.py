"""Periodic jobs, fired by the maintenance leader.

Each tick reads the schedules (one small table), computes each one's due fire times from
its expression and ``last_fire_at`` (the time of its creation before the first fire), and
fires it with ``cron_schedule_fire``: a compare-and-set on ``last_fire_at`` and the job
inserts in one statement. Fire times depend only on the expression and the stored row, so
two processes that race on a schedule compute the same fires and exactly one of them
wins; a leader that dies mid-tick leaves either nothing or everything of a fire behind.

Time is the database's clock, read with the schedules: which host leads must not change
when a schedule fires (a leader whose clock ran 90 s ahead enqueued fires 90 s early, and
a change of leader to one behind skipped fires). A clock is injectable (``clock=``) so
tests can walk a schedule across a DST change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa.cronexpr import CronExpression
from awa.db import sql
from awa.errors import ValidationError
from awa.log import fault
from awa.periodic import PeriodicJob, definitions_json

logger = logging.getLogger("awa")

# catch_up enqueues at most this many missed fires per schedule per tick; the rest follow
# on the next ticks, so a long outage never becomes one giant statement. Fires that came
# due while the leader ticked go in statements of this many too.
CATCH_UP_BATCH = 100
# More fires than this due since the previous tick (a per-second schedule beside a tick
# blocked for a quarter of an hour) are folded by coalesce as missed ones, with a warning.
FRESH_LIMIT = 1_000
# Tick intervals (cron_interval_ms) after its previous tick ended past which a leader
# that has not ticked counts as stalled: what came due meanwhile is missed.
STALL_TICKS = 3

Clock = Callable[[], datetime]


async def register(pool: AsyncConnectionPool, jobs: Sequence[PeriodicJob]) -> None:
    """Store (or update) these definitions; paused state and last fire are kept. A stored
    definition this replaces is logged: a redeploy, or two services registering one name
    (then each start of either takes the schedule from the other)."""
    if not jobs:
        return
    async with pool.connection() as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.CRON_SCHEDULE_UPSERT, {"schedules": definitions_json(list(jobs))})
        replaced = await cur.fetchall()
    mine = {job.name: job for job in jobs}
    for old in replaced:
        _report_redefined(old, mine[old["name"]].row())


# A schedule whose job or timing changed may be another service's under the same name;
# new args or options are what a redeploy brings.
_WHAT_AND_WHEN = ("cron_expr", "timezone", "kind", "queue")


def _report_redefined(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    changed = [field for field in new if field != "name" and _stored(old[field]) != new[field]]
    extra = {"event": "cron_redefined", "cron": old["name"], "changed": changed}
    if not any(field in _WHAT_AND_WHEN for field in changed):
        logger.info("cron schedule %r redefined by this process (%s changed)",
                    old["name"], ", ".join(changed), extra=extra)  # fmt: skip
        return
    logger.warning(
        "cron schedule %r was %s; this process replaced it with %s (the last process to "
        "start decides: if another service registers this name, give one of them "
        "another)", old["name"], _described(old), _described(new), extra=extra,
    )  # fmt: skip


def _stored(value: Any) -> Any:
    """A stored value as the definition holds it (tags come back as a list)."""
    return list(value) if isinstance(value, tuple) else value


def _described(definition: Mapping[str, Any]) -> str:
    return (
        f"{definition['cron_expr']!r} ({definition['timezone']}) enqueuing "
        f"{definition['kind']!r} on queue {definition['queue']!r}"
    )


def due_fires(
    expr: CronExpression,
    base: datetime,
    now: datetime,
    policy: str,
    looked_at: datetime | None = None,
) -> list[datetime]:
    """Fire instants in (base, now] that a tick should enqueue under ``policy``.

    ``looked_at``: when this leader's previous tick looked, if it was a tick ago (None
    for its first, or after a stall). A fire after it came due since, and is enqueued
    whatever the policy: ticks are a second or more apart, so one tick often finds two
    fires of a per-second schedule, and coalescing them lost one in every few dozen with
    nothing down (a review). Only fires no tick was there for — downtime, a new leader, a
    stalled one — are missed ones, for ``coalesce`` to fold into the latest.

    All of those fires are enqueued, up to FRESH_LIMIT: capped at CATCH_UP_BATCH, a tick
    that found more (one blocked on a lock for 110 s found 111) enqueued 100, and the next
    went on from its own start — the rest lost (a review). (A schedule whose write failed
    is reckoned from the look before its failure: see CronService.tick.)"""
    if policy == "catch_up":
        return _each_fire(expr, base, now, CATCH_UP_BATCH)
    if looked_at is not None:
        fresh = _each_fire(expr, max(base, looked_at), now, FRESH_LIMIT + 1)
        if 0 < len(fresh) <= FRESH_LIMIT:
            return fresh
        if fresh:
            logger.warning(
                "cron: more than %d fires came due since the previous tick; coalesce enqueues "
                "the latest only (is a lock held on awa.cron_schedules?)", FRESH_LIMIT,
            )  # fmt: skip
    latest = expr.latest_in(base, now)
    return [] if latest is None else [latest]


def _each_fire(expr: CronExpression, base: datetime, now: datetime, limit: int) -> list[datetime]:
    fires: list[datetime] = []
    current = base
    while len(fires) < limit:
        nxt = expr.next_after(current)
        if nxt is None or nxt > now:
            break
        fires.append(nxt)
        current = nxt
    return fires


def _all_due(
    schedules: list[tuple[dict[str, Any], CronExpression]],
    now: datetime,
    looked_at: datetime | None,
    owed: Mapping[str, datetime],
) -> list[list[datetime]]:
    """:func:`due_fires` of each schedule (its base: the last fire, else its creation);
    one whose firing failed is reckoned from the look before its failures (``owed``)."""
    due: list[list[datetime]] = []
    for row, expr in schedules:
        base = row["last_fire_at"] or row["created_at"]
        looked = looked_at if looked_at is None else owed.get(row["name"], looked_at)
        due.append(due_fires(expr, base, now, row["missed_fire_policy"], looked))
    return due


class CronService:
    """The leader's tick: fire every due, unpaused schedule exactly once."""

    def __init__(
        self, pool: AsyncConnectionPool, clock: Clock | None = None, interval_s: float = 1.0
    ) -> None:
        """``clock`` None: the database's (read with the schedules at each tick)."""
        self._pool = pool
        self._clock = clock
        # A previous tick that ended longer ago than this was no tick ago: the leader
        # stalled (a blocked loop, a lock on the schedules); what came due was missed.
        self._stalled_after = timedelta(seconds=STALL_TICKS * interval_s)
        self._parsed: dict[tuple[str, str], CronExpression | None] = {}
        # (lease epoch, the last tick's now, when that tick ended)
        self._looked: tuple[int, datetime, datetime] | None = None
        self.fired = 0
        # Schedules whose firing failed, each with the look its owed fires count from.
        self._owed: dict[str, datetime] = {}

    def _expression(self, row: dict[str, Any]) -> CronExpression | None:
        key = (row["cron_expr"], row["timezone"])
        if key not in self._parsed:
            try:
                self._parsed[key] = CronExpression.parse(*key)
            except ValidationError as exc:
                logger.warning("cron schedule %s cannot be evaluated: %s", row["name"], exc)
                self._parsed[key] = None
        return self._parsed[key]

    async def tick(self, epoch: int) -> int:
        """Fire what is due now, as the leader of lease ``epoch``; returns how many jobs
        were enqueued."""
        started = time.monotonic()
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(sql.CRON_SCHEDULE_LIST, {"name": None})
            rows = await cur.fetchall()
        if not rows:
            return 0
        # In UTC: the row carries the session's time zone, and Python compares and
        # subtracts two datetimes of one zone by their wall clocks (wrong across DST)
        now: datetime = (
            self._clock() if self._clock is not None else rows[0]["db_now"].astimezone(UTC)
        )
        live = [(row, expr) for row in rows
                if not row["paused"] and (expr := self._expression(row)) is not None]  # fmt: skip
        looked_at = self._looked_at(epoch, now)
        # Off the loop, in one hop per tick: a catch-up of a per-second schedule near a DST
        # change costs seconds of CPU, and the loop renews the leader's lease meanwhile.
        if looked_at is None:
            self._owed.clear()  # a new lease, or a stall: what is missed is missed
        due = await asyncio.to_thread(_all_due, live, now, looked_at, self._owed)
        enqueued = 0
        for (row, _), fires in zip(live, due, strict=True):
            name = row["name"]
            try:
                enqueued += await self._fire_all(row, fires, epoch)
            except Exception as exc:
                # One schedule's refused write (a value the server rejects, a trigger)
                # held back every schedule after it, and ticks failing in a row read as a
                # stall, whose coalesce lost their fires (a review). Its fires are owed
                # from the look before, tried again next tick; the others go on.
                if looked_at is not None:
                    self._owed.setdefault(name, looked_at)
                logger.warning(
                    "cron %s: enqueuing its fires failed (%s); tried again at the next tick",
                    name, fault(exc), extra={"event": "cron_fire_failed", "cron": name},
                )  # fmt: skip
            else:
                self._owed.pop(name, None)
        # when it ended, on the same clock as ``now``
        ended = (
            self._clock()
            if self._clock is not None
            else now + timedelta(seconds=time.monotonic() - started)
        )
        self._looked = (epoch, now, ended)
        self.fired += enqueued
        return enqueued

    async def _fire_all(self, row: dict[str, Any], fires: list[datetime], epoch: int) -> int:
        """Enqueue ``fires`` of one schedule, CATCH_UP_BATCH per statement."""
        enqueued, previous = 0, row["last_fire_at"]
        for at in range(0, len(fires), CATCH_UP_BATCH):
            batch = fires[at : at + CATCH_UP_BATCH]
            fired = await self._fire(row["name"], previous, batch, epoch)
            if not fired:  # another process fired them first: it goes on from there
                break
            enqueued, previous = enqueued + fired, batch[-1]
        return enqueued

    def _looked_at(self, epoch: int, now: datetime) -> datetime | None:
        """The previous tick's time, if it was a tick ago under this lease (what another
        lease of this process saw says nothing of what came after it)."""
        if self._looked is None or self._looked[0] != epoch:
            return None
        _, looked_at, ended = self._looked  # a slow tick is no stall: measured from its end
        return looked_at if now - ended <= self._stalled_after else None

    async def _fire(
        self, name: str, previous: datetime | None, fires: list[datetime], epoch: int
    ) -> int:
        params = {
            "name": name,
            "previous": previous,
            "last_fire_at": fires[-1],
            "fire_times": fires,
            "epoch": epoch,
        }
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.CRON_SCHEDULE_FIRE, params)
            inserted = len(await cur.fetchall())
        if inserted:
            logger.info(
                "cron %s fired %d job(s) for %s", name, inserted, fires[-1].isoformat(),
                extra={"cron": name},
            )  # fmt: skip
        else:
            logger.debug("cron %s: another process fired %s first", name, fires[-1])
        return inserted
