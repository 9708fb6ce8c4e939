"""Leader election: one worker in the fleet runs maintenance.

The leader holds a session-level advisory lock on a dedicated connection. If that
process dies or its connection drops, PostgreSQL releases the lock and another worker
takes over at its next attempt (every ``election_interval_s``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from psycopg import AsyncConnection

from awa.db import sql
from awa.maintenance.periodic import Periodic, cancel_and_wait

logger = logging.getLogger("awa")

# Arbitrary but fixed: the advisory lock key of the maintenance leader.
LEADER_LOCK_KEY = 0x61776100_6C656164


class Leader:
    """Campaigns for the lock; runs ``services`` while it holds it."""

    def __init__(self, url: str, services: Sequence[Periodic], election_interval_s: float) -> None:
        self._url = url
        self._services = list(services)
        self._interval = election_interval_s
        self._task: asyncio.Task[None] | None = None
        self.is_leader = False
        self.elections = 0

    def start(self) -> None:
        """Start campaigning. Idempotent."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="awa-leader")

    async def stop(self) -> None:
        """Stop services and campaigning; the lock goes with the connection. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)  # a cancellation can be lost (Python 3.11)
        await self._step_down()

    @property
    def alive(self) -> bool:
        """True while the campaign loop runs."""
        return self._task is not None and not self._task.done()

    async def _step_down(self) -> None:
        if self.is_leader:
            logger.info("maintenance leadership released", extra={"event": "leader_released"})
        self.is_leader = False
        for service in self._services:
            await service.stop()

    async def _run(self) -> None:
        while True:
            try:
                async with await AsyncConnection.connect(self._url, autocommit=True) as conn:
                    await self._campaign(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("leader election: %s", exc, extra={"event": "leader_error"})
            await self._step_down()
            await asyncio.sleep(self._interval)

    async def _campaign(self, conn: AsyncConnection[tuple[object, ...]]) -> None:
        while True:
            cur = await conn.execute(sql.LEADER_TRY_LOCK, {"key": LEADER_LOCK_KEY})
            row = await cur.fetchone()
            if row is not None and row[0]:
                break
            await asyncio.sleep(self._interval)
        self.is_leader = True
        self.elections += 1
        logger.info("became maintenance leader", extra={"event": "leader_elected"})
        for service in self._services:
            service.start()
        # Hold the lock; a failed probe means the connection (and the lock) is gone.
        while True:
            await asyncio.sleep(self._interval)
            await conn.execute("SELECT 1")
