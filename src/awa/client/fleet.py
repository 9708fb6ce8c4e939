"""Fleet-wide limits and the fleet pool (CONTRACT §8–§9, ADR 0010): validation and the
statements that store them.

Every write runs in its own transaction after taking the claim lock it changes (the
queue's, or the pool's), as a statement of its own: in READ COMMITTED the write's
snapshot then holds every claim committed before it, so limits, rate buckets and the
partition keys of adopted jobs change together, never under a claim in progress.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg import errors as pg
from psycopg.rows import dict_row

from awa import validate
from awa.db import sql
from awa.db.errors import mapped
from awa.errors import MinWorkersExceedGlobal, ValidationError
from awa.types import FleetPool, PoolMember, QueueLimits, QueueLimitsStatus

PARTITION_KEY_MAX = 63
TOP_PARTITIONS = 5
# How long a limit writer waits on a lock a completion may hold (a running job's row, the
# claim lock) before it gives way and tries again: far below deadlock_timeout (1 s by
# default), so the completions it held up lose at most this much (lock_wait_bound.sql).
LOCK_WAIT = "50ms"
# For this long a writer gives way; then it waits as long as it must, leaving a cycle to
# PostgreSQL's deadlock detection, so a queue whose completions never pause cannot keep
# it out for ever.
GIVE_WAY_S = 5.0
_RETRY_FIRST_S = 0.01
_RETRY_MAX_S = 0.2


def limit_params(
    queue: str,
    concurrency: int | None,
    rate_limit: float | None,
    burst: int | None,
    partition_by: str | None,
) -> dict[str, Any]:
    """Validate every limit before anything is written (ValidationError names the field)."""
    if burst is not None and rate_limit is None:
        raise ValidationError("burst", "needs rate_limit: a burst is the size of its bucket")
    if rate_limit is not None:
        validate.rate("rate_limit", rate_limit)
    if partition_by is not None:
        validate.name("partition_by", partition_by, max_length=PARTITION_KEY_MAX)
    return {
        "queue": validate.name("queue", queue),
        "concurrency": None
        if concurrency is None
        else validate.integer("concurrency", concurrency, low=1, high=validate.INT32_MAX),
        "rate_limit": None if rate_limit is None else float(rate_limit),
        "burst": None
        if burst is None
        else validate.integer("burst", burst, low=1, high=validate.INT32_MAX),
        "partition_by": partition_by,
    }


def _limits(row: Mapping[str, Any]) -> QueueLimits:
    return QueueLimits(
        queue=row["queue"],
        concurrency=row["concurrency"],
        rate_limit=row["rate_limit"],
        burst=row["burst"],
        partition_by=row["partition_by"],
        updated_at=row["updated_at"],
    )


async def set_queue_limits(
    conn: AsyncConnection[Any], params: dict[str, Any]
) -> QueueLimits | None:
    """Store ``params`` (from :func:`limit_params`) as the queue's whole limit state.

    Nothing set at all is the same as clearing: an unlimited queue keeps no row, so its
    workers stay on the plain claim path.
    """
    if all(params[key] is None for key in ("concurrency", "rate_limit", "partition_by")):
        await clear_queue_limits(conn, params["queue"])
        return None
    row = await _write_limits(
        conn, params["queue"], params["partition_by"], sql.QUEUE_LIMITS_SET, params, rekeys=True
    )
    assert row is not None  # the upsert always returns its row
    return _limits(row)


async def _write_limits(
    conn: AsyncConnection[Any],
    queue: str,
    partition_by: str | None,
    statement: LiteralString,
    params: dict[str, Any],
    *,
    rekeys: bool = False,
) -> dict[str, Any] | None:
    """Run ``statement`` in a transaction of its own under the queue's locks; the row it
    returns. ``rekeys``: it re-keys the queue's running jobs when partition_by changes.

    Past its own locks (writer, partitioning) the writer meets locks a completion holds
    while it waits for the claim lock; for GIVE_WAY_S it waits on each at most LOCK_WAIT,
    then gives way and tries again after a short random pause, so a cycle with a
    completion costs that completion no more than LOCK_WAIT. A timeout on its own locks
    (an operator's lock_timeout) is not retried."""
    loop = asyncio.get_running_loop()
    give_way_until = loop.time() + GIVE_WAY_S
    pause = _RETRY_FIRST_S
    with mapped():
        while True:
            past_own_locks = False
            try:
                async with conn.transaction():
                    changes = await _lock_writer(conn, queue, partition_by)
                    past_own_locks = True
                    bounded = loop.time() < give_way_until
                    await _lock_claims(conn, queue, rekeys and changes, bounded=bounded)
                    cur = conn.cursor(row_factory=dict_row)
                    await cur.execute(statement, params)
                    return await cur.fetchone()
            except (pg.LockNotAvailable, pg.DeadlockDetected):
                if not past_own_locks:
                    raise
                pause = await _give_way(pause)


async def _give_way(pause: float) -> float:
    """Wait a random part of ``pause`` before trying again; the next pause (doubled, at
    most _RETRY_MAX_S): writers that gave way to each other do not meet again in step."""
    await asyncio.sleep(random.uniform(0, pause))
    return min(pause * 2, _RETRY_MAX_S)


async def _lock_writer(conn: AsyncConnection[Any], queue: str, partition_by: str | None) -> bool:
    """The locks of a writer of limits, in this order, as every writer takes them: the
    queue's writer lock (so the stored partition_by read next stays as read), then its
    partitioning lock when ``partition_by`` is to change (migration 0025: waits for the
    inserts keyed by the stored one). True when partition_by changes."""
    params = {"queue": queue}
    await conn.execute(sql.QUEUE_LIMITS_WRITER_LOCK, params)
    stored = await queue_limits(conn, queue)
    changes = (stored.partition_by if stored is not None else None) != partition_by
    if changes:
        await conn.execute(sql.QUEUE_PARTITION_LOCK, params)
    return changes


async def _lock_claims(
    conn: AsyncConnection[Any], queue: str, running_rows: bool, *, bounded: bool
) -> None:
    """Then what claims and completions hold: the queue's running jobs first when they are
    to be re-keyed (queue_running_lock.sql), then its claim lock — every wait bounded by
    LOCK_WAIT while ``bounded``."""
    params = {"queue": queue}
    if bounded:
        await conn.execute(sql.LOCK_WAIT_BOUND, {"lock_wait": LOCK_WAIT})
    if running_rows:
        await conn.execute(sql.QUEUE_RUNNING_LOCK, params)
    await conn.execute(sql.QUEUE_LOCK, params)


async def clear_queue_limits(conn: AsyncConnection[Any], queue: str) -> QueueLimits | None:
    """Remove the queue's limits; returns what was stored (None: nothing was)."""
    queue = validate.text("queue", queue)
    row = await _write_limits(conn, queue, None, sql.QUEUE_LIMITS_CLEAR, {"queue": queue})
    return None if row is None else _limits(row)


async def queue_limits(conn: AsyncConnection[Any], queue: str) -> QueueLimits | None:
    """The stored limits of ``queue`` (None: unlimited)."""
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.QUEUE_LIMITS_GET, {"queue": validate.text("queue", queue)})
        row = await cur.fetchone()
    return None if row is None else _limits(row)


async def queue_limits_status(
    conn: AsyncConnection[Any], queue: str | None = None
) -> list[QueueLimitsStatus]:
    """Every limited queue (or just ``queue``) with the fleet's running count now."""
    if queue is not None:
        validate.text("queue", queue)
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.QUEUE_LIMITS_STATUS, {"queue": queue, "top": TOP_PARTITIONS})
        rows = await cur.fetchall()
    return [
        QueueLimitsStatus(
            limits=_limits(row),
            running=row["running"],
            top_partitions=[(key, running) for key, running in row["top_partitions"]],
            tokens=row["tokens"],
        )
        for row in rows
    ]


def pool_params(total: int, queues: Mapping[str, PoolMember]) -> dict[str, Any]:
    """Validate a fleet pool before anything is written."""
    validate.integer("total", total, low=1, high=validate.INT32_MAX)
    if not isinstance(queues, Mapping) or not queues:
        raise ValidationError("queues", "name at least one member queue: {name: PoolMember}")
    names, minimums, weights = [], [], []
    for name, member in queues.items():
        validate.name("queues", name)
        if not isinstance(member, PoolMember):
            raise ValidationError(
                f"queues[{name!r}]", f"must be an awa.PoolMember, got {type(member).__name__}"
            )
        names.append(name)
        minimums.append(
            validate.integer(
                f"queues[{name!r}].min_workers", member.min_workers, low=0, high=validate.INT32_MAX
            )
        )
        weights.append(
            validate.integer(
                f"queues[{name!r}].weight", member.weight, low=1, high=validate.INT32_MAX
            )
        )
    if sum(minimums) > total:
        raise MinWorkersExceedGlobal(sum(minimums), total, limit="the pool total")
    return {"total": total, "queues": names, "min_workers": minimums, "weights": weights}


async def _write_pool(
    conn: AsyncConnection[Any], statement: LiteralString, params: Any, *, read_back: bool = False
) -> Any:
    """Run ``statement`` under the pool's lock in a transaction of its own; its first row,
    or (``read_back``) the pool as stored, read in the same transaction: read after it, a
    concurrent clear could leave none to return (an AssertionError, a review).

    Before migration 0030 a claim riding on a completion could hold a member row (its
    demand signal, ``asked_at``) while it waited for the pool's lock this writer held,
    and deadlock detection ended one of the two; the signal no longer waits for the row.
    The write is whole-state, so should detection still end it (a cycle through another
    lock), it tries again, for GIVE_WAY_S."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + GIVE_WAY_S
    pause = _RETRY_FIRST_S
    with mapped():
        while True:
            try:
                async with conn.transaction():
                    await conn.execute(sql.POOL_LOCK)
                    cur = await conn.execute(statement, params)
                    row = await cur.fetchone()
                    return await fleet_pool(conn) if read_back else row
            except pg.DeadlockDetected:
                if loop.time() >= give_up_at:
                    raise
                pause = await _give_way(pause)


async def set_fleet_pool(conn: AsyncConnection[Any], params: dict[str, Any]) -> FleetPool:
    """Store the pool from :func:`pool_params` (whole state) and return it as stored."""
    pool: FleetPool = await _write_pool(conn, sql.FLEET_POOL_SET, params, read_back=True)
    return pool


async def clear_fleet_pool(conn: AsyncConnection[Any]) -> bool:
    """Remove the pool; True when there was one."""
    row = await _write_pool(conn, sql.FLEET_POOL_CLEAR, None)
    return bool(row and row[1])


async def fleet_pool(conn: AsyncConnection[Any]) -> FleetPool | None:
    """The stored pool with each member's running jobs now (None: no pool)."""
    with mapped():
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql.FLEET_POOL_GET)
        row = await cur.fetchone()
    if row is None:
        return None
    members = row["members"]
    return FleetPool(
        total=row["total"],
        queues={m["queue"]: PoolMember(m["min_workers"], m["weight"]) for m in members},
        updated_at=row["updated_at"],
        running={m["queue"]: m["running"] for m in members},
    )
