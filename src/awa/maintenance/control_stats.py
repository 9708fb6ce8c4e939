"""The leader keeps the statistics of awa's control tables current (migration 0034).

Pause and overrides (``queue_meta``), fleet limits and the fleet pool hold a few rows
each, written by operators now and then: autovacuum, which analyzes a table after 50
changes, may never get to them. Planned from stale statistics (an empty table, or none:
then PostgreSQL assumes some two thousand rows), ``job_explain`` and every worker's
control refresh joined them to the running jobs of a busy table at a cost past
``jit_above_cost``, and compiling them took a second where running takes a millisecond.
So every ``CHECK_INTERVAL_S`` the leader reads whether any changed since it was
analyzed (one row of the statistics views) and analyzes them if so (milliseconds).

A role that may not analyze them (not their owner) gets a warning from PostgreSQL
instead: the leader says so once and stops trying.
"""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.maintenance.vacuum import warnings_of

logger = logging.getLogger("awa")

CHECK_INTERVAL_S = 30.0


class ControlStats:
    """Analyzes the control tables when they changed."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self.analyzes = 0
        self.refused: str | None = None  # PostgreSQL's reason, once it refused us

    async def tick(self) -> bool:
        """Analyze when a control table changed; True when it ran."""
        if self.refused is not None:
            return False
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.CONTROL_TABLES_STALE)
            row = await cur.fetchone()
            if row is None or not row[0]:
                return False
            warnings = await warnings_of(conn, sql.CONTROL_TABLES_ANALYZE)
        if warnings:
            self.refused = warnings[0].message or "refused"
            logger.warning(
                "awa's control tables are not analyzed by this worker (%s); run the "
                "worker as their owner, or have them analyzed after each change of "
                "limits, pool or overrides", self.refused,
                extra={"event": "control_analyze_refused"},
            )  # fmt: skip
            return False
        self.analyzes += 1
        return True
