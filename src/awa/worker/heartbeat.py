"""Heartbeats: one batched statement per interval for every attempt this process owns.

An attempt whose row no longer matches (rescued elsewhere, cancelled) has lost its
lease: its handler is told to stop, and its outcome will be fenced anyway.

An attempt the heartbeat cannot reach the database for is stopped too, before its job can
be rescued: a worker cut off from the server (a network partition, a pool held by the
application, a statement that hangs) cannot learn that its lease was taken, and its
handler would run on beside the job's next run elsewhere (:func:`unconfirmed_limit_s`).
"""

from __future__ import annotations

import logging
import time

from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.worker.attempt_keys import cancelled_among, key_arrays
from awa.worker.completer import Completer
from awa.worker.executor import Executor
from awa.worker.results import AttemptKey

logger = logging.getLogger("awa")


async def still_running(
    pool: AsyncConnectionPool, keys: list[AttemptKey], synchronous_commit: bool = False
) -> set[int]:
    """Heartbeat the attempts of ``keys``; returns the ids still running under them,
    their rows held by another transaction or not (the re-check of an old claim: a row an
    operator holds still names this attempt — a review saw such a claim dropped)."""
    alive, held = await beat_rows(pool, keys, synchronous_commit)
    return alive | held


async def beat_rows(
    pool: AsyncConnectionPool, keys: list[AttemptKey], synchronous_commit: bool = False
) -> tuple[set[int], set[int]]:
    """Heartbeat the attempts of ``keys``: the ids still running under them, and the ids
    whose rows another transaction holds (skipped: neither confirmed nor lost)."""
    params = {**key_arrays(keys), "synchronous_commit": "on" if synchronous_commit else "off"}
    async with pool.connection() as conn:
        cur = await conn.execute(sql.JOB_HEARTBEAT_MANY, params)
        rows = await cur.fetchall()
    return {i for i, held in rows if not held}, {i for i, held in rows if held}


def unconfirmed_limit_s(interval_ms: int, staleness_ms: int) -> float:
    """How long a handler may run with no heartbeat confirming its lease: from when the
    claim or the last confirming beat was *sent* (the row's heartbeat_at is no older), the
    staleness less a margin for the handler to stop — the heartbeat interval or a quarter
    of the staleness, whichever is longer (60 s of the default 90), but never so close to
    the interval that an ordinary late beat stops it."""
    staleness, interval = staleness_ms / 1000, interval_ms / 1000
    return max(staleness - max(interval, staleness / 4), (staleness + interval) / 2)


async def _cancelled(pool: AsyncConnectionPool, keys: list[AttemptKey]) -> set[int]:
    """A cancel the heartbeat learns of before its notice still stops the handler as one."""
    async with pool.connection() as conn:
        return await cancelled_among(conn, keys)


async def beat(
    pool: AsyncConnectionPool,
    executor: Executor,
    completer: Completer,
    synchronous_commit: bool = False,
) -> int:
    """Refresh heartbeats; returns how many attempts had lost their lease."""
    running = executor.in_flight()
    # Deduplicated by the whole fencing key, not by job id: a stale attempt's outcome
    # still waiting in the completer must not hide a newer attempt of the same job that
    # this worker claimed since (that one would miss its heartbeat and be cancelled).
    keys = list(dict.fromkeys([*running, *completer.attempts()]))
    if not keys:
        return 0
    sent = time.monotonic()
    alive, held = await beat_rows(pool, keys, synchronous_commit)
    executor.lease_confirmed(running, alive, sent)
    gone = [key for key in running if key[0] not in alive and key[0] not in held]
    cancelled = await _cancelled(pool, gone) if gone else set()
    lost = 0
    for key in gone:
        job_id, lease, _ = key
        reason = "cancelled" if job_id in cancelled else "lease lost"
        # The whole key: this beat's list predates its awaits, and the job may have been
        # claimed again meanwhile under the same lease (ADR 0006); that attempt lives.
        if executor.cancel(job_id, reason, key=key):
            lost += 1
            logger.info(
                "job %s lost its lease (rescued or cancelled); stopping its handler", job_id,
                extra={"event": "lease_lost", "job_id": job_id, "run_lease": lease},
            )  # fmt: skip
    return lost
