"""Watches the idle queues of a worker in one statement (ADR 0011).

A dispatcher whose last claim found its queue empty goes idle and sends nothing more of
its own: ``LISTEN`` notices wake it when jobs arrive. Notices can be missed (a listener
reconnecting, a job made available by hand), so the prober looks at every idle queue
once per that queue's poll interval — all of them due at the same moment in ONE
statement (``queue_probe_available``) — and wakes those that have jobs. Before this, each
idle queue sent a claim per poll interval: 1 000 idle queues cost ~5 000 statements and
a whole core a second; now they cost one statement per poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService
from awa.worker.dispatcher import Dispatcher

logger = logging.getLogger("awa")

_ERROR_BACKOFF_S = 1.0


class IdleProber(LoopService):
    """Checks idle queues for jobs, one statement for all that are due."""

    def __init__(self, pool: AsyncConnectionPool, dispatchers: Mapping[str, Dispatcher]) -> None:
        super().__init__("idle-probe")
        self._pool = pool
        self._dispatchers = dispatchers
        self._changed = asyncio.Event()
        self.probes = 0
        self.probing = False  # a probe statement is on its way (its answer may be news)
        for dispatcher in dispatchers.values():
            dispatcher.watch_idle(self._changed.set)

    def _on_stop(self) -> None:
        self._changed.set()

    async def probe_due(self, now: float) -> None:
        """Probe the idle queues whose turn has come; wake those with jobs."""
        due = [d for d in self._dispatchers.values() if d.idle and d.probe_due <= now]
        if not due:
            return
        queues = [d.queue for d in due]
        self.probing = True
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql.QUEUE_PROBE_AVAILABLE, {"queues": queues})
                with_jobs = {row[0] for row in await cur.fetchall()}
        finally:
            self.probing = False
        self.probes += 1
        for dispatcher in due:
            dispatcher.probe_due = now + dispatcher.control.poll_sleep_s
            if dispatcher.queue in with_jobs:
                dispatcher.wake()

    def _next_due(self) -> float | None:
        return min((d.probe_due for d in self._dispatchers.values() if d.idle), default=None)

    async def _run(self) -> None:
        while not self.stopping:
            self._changed.clear()
            try:
                await self.probe_due(time.monotonic())
                self.healthy = True
            except Exception as exc:  # database trouble: the dispatchers' notices still work
                self.healthy = False
                logger.warning(
                    "idle probe failed (%s); retrying", fault(exc),
                    exc_info=traceback_unless_expected(exc),
                )  # fmt: skip
                await asyncio.sleep(_ERROR_BACKOFF_S)
                continue
            due = self._next_due()
            timeout = None if due is None else max(0.0, due - time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._changed.wait()
