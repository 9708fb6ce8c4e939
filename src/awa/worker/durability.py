"""Outcomes become *durable*: lifecycle hooks fire once an outcome survives a server crash.

Worker outcomes commit asynchronously (ADR 0006): a commit returns before its WAL record
reaches the disk, and a server crash in between forgets it — the job is rescued and runs
again. Hooks fired at the commit then fired twice for such a job. So the completer hands
each committed batch here, and :class:`DurableOutcomes` calls ``outcomes_durable`` only
when the server's WAL flush position has passed the batch's commit (ADR 0017):

* ONE statement per poll (``wal_positions``) serves every batch waiting, whatever the
  throughput; no statement at all while nothing waits, and none on the hot path;
* a batch gets as its marker the WAL *insert* position read after its commit returned
  (so at or past its commit record); it is durable once the *flush* position reaches it;
* a crash can discard WAL inserted but not yet written, and new WAL then reuses those
  positions, so markers read before a crash mean nothing after it. Crash recovery always
  ends with a checkpoint: when the server's checkpoint has changed since a batch was
  handed over *and the server restarted or reset after a crash* (``server_run`` in
  ``wal_positions.sql``), the batch
  is looked up instead: a lost outcome runs again and is reported then; a stored one
  waits for the flush like a batch of the new epoch, with the insert position of that
  poll as its marker (it may have been committed after the checkpoint's record, so it
  is not known durable yet). A routine checkpoint loses nothing, and positions read
  before it still hold: such a batch simply goes on waiting for the flush (looked up,
  an outcome whose row moved on — to the DLQ, or claimed again — read as lost). The
  checkpoint is read once before the worker claims anything
  (:meth:`DurableOutcomes.prime`), so even the first batches know the epoch they were
  committed in: a crash before the first poll is told apart too;
* on stop, one synchronous commit (``wal_flush_now``) makes everything durable so the
  last hooks fire.

With ``synchronous_commit=True`` every commit is durable when it returns, and the
completer reports at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import LiteralString

from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService
from awa.worker.observe import Observer
from awa.worker.results import Finalization

logger = logging.getLogger("awa")

POLL_S = 0.05  # between checks while batches wait (the WAL writer flushes every 200 ms)


@dataclass(slots=True)
class _Waiting:
    batch: Sequence[Finalization]
    epoch: int | None  # the server's checkpoint as known when the batch was handed over
    marker: int | None = None  # the WAL insert position read after its commit
    started: object = None  # the server's run as known then (a restart or reset changes it)


class DurableOutcomes(LoopService):
    """Reports committed batches of outcomes to ``observer`` once they are durable."""

    stop_grace_s = 2.0

    def __init__(self, pool: AsyncConnectionPool, observer: Observer) -> None:
        super().__init__("durable-outcomes")
        self._pool = pool
        self._observer = observer
        self._waiting: list[_Waiting] = []
        self._wakeup = asyncio.Event()
        self._epoch: int | None = None
        self._started: object = None  # the server's run (wal_positions.sql), as last read
        self.checks = 0

    @property
    def waiting(self) -> int:
        """Outcomes committed and not known durable yet."""
        return sum(len(w.batch) for w in self._waiting)

    async def prime(self) -> None:
        """Learn the server's checkpoint before any outcome is committed. Without it a
        batch handed over before the first poll could only be assumed to belong to the
        epoch that poll reads — wrong when the server crashed in between, which then
        reported outcomes the crash had lost (and fired their hooks twice)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.WAL_POSITIONS)
            row = await cur.fetchone()
        assert row is not None
        self._epoch, self._started = int(row[2]), row[3]

    def committed(self, batch: Sequence[Finalization]) -> None:
        """``batch`` was committed (asynchronously): report it once durable."""
        self._waiting.append(_Waiting(batch, self._epoch, started=self._started))
        self._wakeup.set()

    def _on_stop(self) -> None:
        self._wakeup.set()

    async def _run(self) -> None:
        delay = POLL_S
        while not (self.stopping and not self._waiting):
            if not self._waiting:
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            try:
                if self.stopping:
                    await self._execute(sql.WAL_FLUSH_NOW)
                await self._check()
                self.healthy, delay = True, POLL_S
            except Exception as exc:  # the server may be restarting: try again
                self.healthy = False
                logger.warning(
                    "durable outcomes: %s; retrying in %.2fs", fault(exc), delay,
                    exc_info=traceback_unless_expected(exc),
                )  # fmt: skip
                delay = min(delay * 2, 5.0)
            if self._waiting:
                await asyncio.sleep(delay)

    async def _execute(self, statement: LiteralString) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(statement)

    async def _check(self) -> None:
        handed_over = len(self._waiting)  # batches committed before the positions are read
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.WAL_POSITIONS)
            row = await cur.fetchone()
        assert row is not None
        inserted, flushed, epoch, started = int(row[0]), int(row[1]), int(row[2]), row[3]
        self.checks += 1
        known, was_started = self._epoch, self._started
        self._epoch, self._started = epoch, started
        if known is not None and known != epoch and was_started != started:
            logger.info(
                "durable outcomes: the server restarted or recovered from a crash; "
                "looking up %d outcome(s) committed before", self.waiting,
                extra={"event": "durability_epoch"},
            )  # fmt: skip
        durable: list[Finalization] = []
        unsure: list[_Waiting] = []
        keep: list[_Waiting] = []
        seen = list(self._waiting)
        for i, waiting in enumerate(seen):
            if waiting.epoch is None or waiting.started == started:
                # Never primed (a completer used on its own): assumed to be of this epoch,
                # as nothing earlier is known. Or the server has not restarted since: a
                # routine checkpoint, which loses nothing.
                waiting.epoch = epoch
            if waiting.epoch != epoch:
                unsure.append(waiting)  # committed before a checkpoint: maybe a crash
                continue
            if waiting.marker is None and i < handed_over:
                waiting.marker = inserted
            if waiting.marker is not None and waiting.marker <= flushed:
                durable.extend(waiting.batch)
            else:
                keep.append(waiting)
        if unsure:
            # What the table holds may still be only in WAL buffers (committed after a
            # routine checkpoint's record, before this poll learnt of it): it waits for the
            # flush like a batch of this epoch, marked with the position read above.
            stored = await self._stored([f for w in unsure for f in w.batch])
            if stored and inserted <= flushed:
                durable.extend(stored)
            elif stored:
                keep.append(_Waiting(stored, epoch, inserted, started))
        self._waiting = keep + self._waiting[len(seen) :]  # plus those handed over meanwhile
        if durable:
            self._observer.outcomes_durable(durable)

    async def _stored(self, outcomes: list[Finalization]) -> list[Finalization]:
        """The outcomes among ``outcomes`` that the table holds (after a checkpoint,
        which a crash recovery ends with: what the table holds then was recovered)."""
        keys = [f.job for f in outcomes]
        params = {
            "ids": [job.id for job in keys],
            "run_leases": [job.run_lease for job in keys],
            "attempted_ats": [job.attempted_at for job in keys],
        }
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.JOB_OUTCOMES_STORED, params)
            positions = {int(row[0]) for row in await cur.fetchall()}  # 1-based
        stored = [f for n, f in enumerate(outcomes, start=1) if n in positions]
        lost = len(outcomes) - len(stored)
        if lost:
            logger.info(
                "durable outcomes: %d outcome(s) were lost in a server crash; their jobs run "
                "again and report then", lost, extra={"event": "outcomes_lost"},
            )  # fmt: skip
        return stored
