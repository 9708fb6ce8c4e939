"""The leader vacuums ``awa.jobs`` once enough dead rows piled up (ADR 0041).

A claim walks ``jobs_claim_idx`` in dispatch order from its start. The entries of jobs
already claimed stay there, marked dead, until a vacuum removes them, so every claim
steps over all the jobs claimed since the last one: measured on PostgreSQL 15, a claim
of 32 touched 250 index and heap pages after 32 000 claimed jobs and 1 219 after
192 000, and its server CPU doubled. Autovacuum visits a database at most once a minute
(``autovacuum_naptime``), by which time a busy worker has claimed hundreds of
thousands of jobs. So the leader reads the table's dead-row count every couple of
seconds (one row of the statistics views) and vacuums when it passes
``vacuum_dead_rows``, at most a tenth of the time: after a vacuum that took d seconds,
the next waits at least 10 d (a big table's vacuum reads every index, and is spaced
out accordingly; a small one's can run every check).

A role that may not vacuum the table (not its owner) gets a warning from PostgreSQL
instead of a vacuum: the leader says so once and stops trying.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg import AsyncConnection, errors
from psycopg_pool import AsyncConnectionPool

from awa.db import sql

logger = logging.getLogger("awa")

CHECK_INTERVAL_S = 2.0
DUTY = 0.1  # the most of the time vacuums may take, back to back
_LOCK_NOT_AVAILABLE = "55P03"  # SKIP_LOCKED skipped it: another vacuum runs right now


class JobsVacuum:
    """Decides when ``awa.jobs`` needs a vacuum, and runs it."""

    def __init__(self, pool: AsyncConnectionPool, dead_rows: int) -> None:
        self._pool = pool
        self.dead_rows = dead_rows  # 0: never
        self.vacuums = 0
        self.last_duration_s = 0.0
        self.refused: str | None = None  # PostgreSQL's reason, once it refused us

    @property
    def enabled(self) -> bool:
        return self.dead_rows > 0 and self.refused is None

    async def tick(self) -> bool:
        """Vacuum when it is due; True when a vacuum ran."""
        if not self.enabled:
            return False
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.JOBS_VACUUM_DUE)
            row = await cur.fetchone()
            if row is None or not self._due(row[0], row[1]):
                return False
            started = time.monotonic()
            warnings = await warnings_of(conn, sql.JOBS_VACUUM)
            self.last_duration_s = time.monotonic() - started
        return self._outcome(warnings, dead=row[0])

    def _due(self, dead: int | None, since_s: float | None) -> bool:
        """Enough dead rows, and the last vacuum (anyone's) long enough ago."""
        if dead is None or dead < self.dead_rows:
            return False
        rest = max(CHECK_INTERVAL_S, self.last_duration_s / DUTY)
        return since_s is None or since_s >= rest

    def _outcome(self, warnings: list[ServerWarning], *, dead: int) -> bool:
        refusals = [w for w in warnings if w.sqlstate != _LOCK_NOT_AVAILABLE]
        if refusals:
            self.refused = refusals[0].message or "refused"
            logger.warning(
                "awa.jobs is not vacuumed by this worker (%s); its claims slow down as "
                "dead rows pile up until autovacuum runs. Run the worker as the table's "
                "owner, or set vacuum_dead_rows=0 to silence this",
                self.refused,
                extra={"event": "jobs_vacuum_refused"},
            )
            return False
        if warnings:  # skipped: a vacuum of the table is already running
            return False
        self.vacuums += 1
        logger.debug("vacuumed awa.jobs (%s dead rows)", dead, extra={"event": "jobs_vacuum"})
        return True


@dataclass(frozen=True, slots=True)
class ServerWarning:
    """A WARNING PostgreSQL sent with a statement: its SQLSTATE and message."""

    sqlstate: str | None
    message: str | None


async def warnings_of(conn: AsyncConnection[Any], query: LiteralString) -> list[ServerWarning]:
    """Run a maintenance statement; the warnings PostgreSQL sent with it (a table the
    role may not vacuum or analyze is skipped with one, not refused with an error)."""
    warnings: list[ServerWarning] = []

    def keep(diagnostic: errors.Diagnostic) -> None:
        # Read now: psycopg's Diagnostic is valid only during this call (kept, it read as
        # all None, and a vacuum skipped because another was running — 55P03 — was taken
        # for a refusal: the worker never vacuumed again; a review)
        if diagnostic.severity_nonlocalized == "WARNING":
            warnings.append(ServerWarning(diagnostic.sqlstate, diagnostic.message_primary))

    conn.add_notice_handler(keep)
    try:
        await conn.execute(query, prepare=False)
    finally:
        conn.remove_notice_handler(keep)
    return warnings
