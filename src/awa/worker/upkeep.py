"""A worker's upkeep beside the claim → execute → complete path: periodic jobs, the dead
letter queue, priority aging, progress flushing, external-callback timeouts and stalled
batch operations.

:class:`Upkeep` keeps these out of the hot path and out of the runtime's core: the
runtime asks it for its leader services (:meth:`maintenance`), runs :meth:`prepare` at
start and :meth:`prune` with the other retention work, and hands :attr:`attempt_services` to
the executor so handlers can reach progress and callbacks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.client import batch
from awa.config import WorkerConfig
from awa.db import sql
from awa.maintenance import aging, callbacks, pruner
from awa.maintenance.cron import Clock, CronService, register
from awa.maintenance.leader import NOT_LEADING
from awa.periodic import PeriodicJob
from awa.service import Periodic
from awa.worker import progress
from awa.worker.attempt import AttemptServices
from awa.worker.executor import Executor

# Batch operations nobody runs (submitted with wait=False, or whose caller went away for
# this long) are carried on by the leader, a bounded number of chunks per tick.
BATCH_TICK_S = 1.0
BATCH_STALE_MS = 5_000


class Upkeep:
    """Builds and owns the feature services of one worker."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        config: WorkerConfig,
        schedules: Sequence[PeriodicJob] = (),
        clock: Clock | None = None,
    ) -> None:
        self.pool = pool
        self.config = config
        self.schedules = list(schedules)
        self.cron = CronService(pool, clock, config.cron_interval_ms / 1000)
        self.attempt_services = AttemptServices(pool)
        self.aging_intervals = aging.aging_queues(config.queues)
        self.progress_flusher = Periodic(
            "progress", config.heartbeat_interval_ms / 1000, self._flush_progress
        )
        self._executor: Executor | None = None
        self._on_rescued: Callable[[str, Any], None] | None = None
        self._epoch: Callable[[], int] = lambda: NOT_LEADING
        self._carrying: set[int] = set()  # batch operations the leader's last tick advanced

    def attach(self, executor: Executor, on_rescued: Callable[[str, Any], None]) -> None:
        """Give handlers launched by ``executor`` access to progress and callbacks."""
        self._executor = executor
        self._on_rescued = on_rescued
        executor.services = self.attempt_services
        self.attempt_services.deadline_noticed = executor.deadlines.noticed

    def maintenance(self, epoch: Callable[[], int]) -> list[Periodic]:
        """Services the elected leader runs; ``epoch()`` is its lease's (ADR 0019)."""
        self._epoch = epoch
        c = self.config
        # Cron runs even when this process registered no schedule: others may have.
        services = [
            Periodic("cron", c.cron_interval_ms / 1000, self._cron),
            Periodic("callback-timeout", c.callback_rescue_interval_ms / 1000, self._timeouts),
            Periodic("batch-operations", BATCH_TICK_S, self._batches),
        ]
        if self.aging_intervals:
            services.append(
                Periodic(
                    "priority-aging",
                    aging.tick_seconds(self.aging_intervals),
                    self._age,
                )
            )
        return services

    async def prepare(self) -> None:
        """At start: store schedules and DLQ flags; bind handlers' sync calls to this loop."""
        self.attempt_services.bind(asyncio.get_running_loop())
        await self.store_registrations()
        self.progress_flusher.start()

    async def store_registrations(self) -> None:
        """Store this worker's cron schedules and the DLQ flags its queues state (at start,
        and again after ``awa.testing.clean`` deleted them under a running worker)."""
        await register(self.pool, self.schedules)
        stated = [q for q in self.config.queues if q.dlq is not None]  # None: as stored
        if stated:
            names = [q.name for q in stated]
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(
                    sql.QUEUE_META_SET_DLQ, {"queues": names, "dlq": [q.dlq for q in stated]}
                )
                # A row the DLQ flag turned off leaves holding nothing goes.
                off = [q.name for q in stated if not q.dlq]
                await conn.execute(sql.QUEUE_META_FORGET_PLAIN, {"queues": off})

    async def stop(self) -> None:
        """Stop this process's own services (the leader stops the maintenance ones)."""
        await self.progress_flusher.stop()

    async def prune(self) -> None:
        """Retention of the dead letter queue and of ended batch operations."""
        await pruner.prune_dlq(self.pool, self.config.dlq_retention_ms, self._epoch())
        await pruner.prune_ended_batches(self.pool, self.config.failed_retention_ms, self._epoch())

    # -- ticks -----------------------------------------------------------------------

    async def _cron(self) -> None:
        await self.cron.tick(self._epoch())

    async def _age(self) -> None:
        await aging.age_priorities(self.pool, self.aging_intervals, self._epoch())

    async def _timeouts(self) -> None:
        rows = await callbacks.rescue_callback_timeouts(self.pool, self._epoch())
        if rows and self._on_rescued is not None:
            self._on_rescued("callback_timeout", rows)
        await callbacks.release_answered_parked(self.pool, self._epoch())

    async def _batches(self) -> None:
        advanced = await batch.run_stalled(
            self.pool, stale_ms=BATCH_STALE_MS, carrying=self._carrying
        )
        self._carrying = {op.id for op in advanced if not op.done}

    async def _flush_progress(self) -> None:
        if self._executor is None:
            return
        await progress.write_many(self.pool, list(self._executor.attempts.values()))
