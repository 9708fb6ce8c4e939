"""Batched, lease-guarded recording of handler outcomes.

Executors ``submit`` finalizations; one flusher task writes everything that accumulated
while the previous statement ran, as ONE ``job_finalize_many`` statement with array
parameters. The backlog is bounded: ``submit`` waits when it is full, which holds the
handler's permit and so slows claiming — backpressure instead of unbounded memory.
A failed flush keeps its batch and retries with backoff. Only an outcome the database
refuses on its own (a data error, after the batch was split into single statements) is
dropped: its job is rescued and runs again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator, Sequence

import psycopg

from awa.db import sql
from awa.db.direct import DirectStatement
from awa.db.lane import ConnectionLane
from awa.db.pool import Pool
from awa.db.rows import WriteRow, write_rows
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService
from awa.worker.args_budget import args_sizes
from awa.worker.attempt_keys import cancelled_among
from awa.worker.claiming import Reservation, Rider
from awa.worker.durability import DurableOutcomes
from awa.worker.observe import Observer
from awa.worker.permits import OverflowPool
from awa.worker.results import AttemptKey, Finalization, attempt_key

logger = logging.getLogger("awa")
# What the server refuses in the outcomes themselves: no retry of the same write succeeds.
_REFUSED = (psycopg.DataError, psycopg.IntegrityError)

_FINALIZE_MANY = DirectStatement("job_finalize_many", sql.JOB_FINALIZE_MANY)  # the hot path
GATHER_S = 0.002
GATHER_AFTER = 8  # outcomes the write just made must reach to count as load


class Completer(LoopService):
    """Collects finalizations and flushes them in batches.

    ``stop()`` lets the flusher write what is pending for up to ``stop_grace_s``; an
    outcome still unwritten after that leaves its job running under a lease nobody
    renews, and the rescuer returns it (at least once).
    """

    stop_grace_s = 2.0

    def __init__(
        self,
        pool: Pool,
        *,
        max_batch: int = 2_000,
        max_backlog: int = 10_000,
        observer: Observer | None = None,
        synchronous_commit: bool = False,
    ) -> None:
        super().__init__("completer")
        self._pool = pool
        # One write at a time: its connection is held from one write to the next.
        self._lane = ConnectionLane()
        self._synchronous_commit = "on" if synchronous_commit else "off"
        self._max_batch = max_batch
        self._max_backlog = max_backlog
        self._pending: list[Finalization] = []
        self._flushing: list[Finalization] = []
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._waiters: dict[int, asyncio.Future[None]] = {}  # id(outcome) → written
        self._observer = observer or Observer()
        # Asynchronous commits are reported durable once the WAL flush passes them.
        self.durable = None if synchronous_commit else DurableOutcomes(pool, self._observer)
        self._riders: list[Rider] = []
        self._by_need: Callable[[Rider], tuple[float, int]] | None = None
        self.applied = 0
        self.stale = 0
        self.dropped = 0  # refused by the database on their own (see _flush_each)
        self.flushes = 0
        # Under load, each write waits this long after the last for more outcomes (ADR
        # 0044): fewer, larger writes leave the event loop and the server to the claims.
        self.gather_s = GATHER_S
        self.gather_after = GATHER_AFTER

    # -- lifecycle -------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the first claim: the durability check learns the server's checkpoint."""
        if self.durable is not None:
            await self.durable.prime()

    def start(self) -> None:
        """Start flushing (and the durability check). Idempotent."""
        super().start()
        if self.durable is not None:
            self.durable.start()

    def _on_stop(self) -> None:
        self._wakeup.set()

    async def _after_stop(self) -> None:
        await self._lane.close(self._pool)
        if self.durable is not None:
            await self.durable.stop()

    async def drain(self) -> None:
        """Wait until every submitted finalization has been written."""
        while self._pending or self._flushing:
            self._idle.clear()
            self._wakeup.set()
            await self._idle.wait()

    # -- producing side --------------------------------------------------------------

    async def submit(self, item: Finalization) -> None:
        """Queue one outcome; waits while the backlog is full."""
        while len(self._pending) >= self._max_backlog:
            self._room.clear()
            await self._room.wait()
        self._pending.append(item)
        self._wakeup.set()

    async def write(self, item: Finalization) -> None:
        """Queue one outcome and wait until it has been written (applied or found stale).

        For the rare outcome something waits on (an abandoned handler's permit); the
        others only pay a check for waiters per batch.
        """
        written = asyncio.get_running_loop().create_future()
        self._waiters[id(item)] = written
        try:
            await self.submit(item)
            await written
        finally:
            self._waiters.pop(id(item), None)

    def attempts(self) -> Iterator[AttemptKey]:
        """Attempts whose outcome is not written yet: their jobs still need heartbeats."""
        for item in self._flushing:
            yield attempt_key(item.job)
        for item in self._pending:
            yield attempt_key(item.job)

    @property
    def backlog(self) -> int:
        """Outcomes waiting to be written."""
        return len(self._pending) + len(self._flushing)

    # -- flushing --------------------------------------------------------------------

    async def _run(self) -> None:
        while not (self.stopping and not self._pending):
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                self._room.set()
                self._flushing = batch
                await self._flush_until_written(batch)
                self._flushing = []
                if self._should_gather(len(batch)):
                    await asyncio.sleep(self.gather_s)
            self._idle.set()

    def _should_gather(self, written: int) -> bool:
        """Under load — the write just made carried ``gather_after`` outcomes or more, and
        more arrived meanwhile — give the next batch ``gather_s`` to fill, unless a claim
        rides on it (that claim's permits wait for the write), the batch is full already,
        or the worker is stopping. A trickle never waits."""
        if self.stopping or self.gather_s <= 0 or written < self.gather_after:
            return False
        if not self._pending or len(self._pending) >= self._max_batch:
            return False
        return not any(rider.rides_next() for rider in self._riders)

    async def _flush_until_written(self, batch: list[Finalization]) -> None:
        delay = 0.05
        applied: set[int] = set()
        left = list(batch)  # outcomes not yet written, when flushing one by one
        one_by_one = False
        while True:
            try:
                if one_by_one:
                    await self._flush_each(left, applied)
                else:
                    applied = await self._flush(batch)
            except _REFUSED as exc:
                # The server refuses a value of the batch (class 22, data exception) or a
                # row it would write (class 23, say a unique key another job holds, from
                # rows written before unique states were checked): retrying the same
                # statement could never succeed, and every job of the batch would wait
                # forever. Write the outcomes one by one instead.
                logger.warning("completer: a batch of %d outcomes was refused (%s); "
                               "writing them one by one", len(batch), fault(exc))  # fmt: skip
                one_by_one = True
                continue
            except Exception as exc:  # connection loss, restart: keep the batch and retry
                self.healthy = False
                logger.warning(
                    "completer: flush of %d outcomes failed (%s); retrying", len(batch),
                    fault(exc), exc_info=traceback_unless_expected(exc),
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.healthy = True
            took = _took_effect(batch, applied)
            if len(took) < len(batch):
                await self._mark_cancelled_first(_others(batch, took))
            self._account(batch, took)
            return

    async def _mark_cancelled_first(self, stale: list[Finalization]) -> None:
        """Mark the stale outcomes whose job an operator cancelled during the attempt (one
        small read, only when a write refused some): a cancel, not a lost lease."""
        try:
            async with self._lane.connection(self._pool) as conn:
                cancelled = await cancelled_among(conn, [attempt_key(f.job) for f in stale])
        except Exception as exc:  # only the wording of the report depends on it
            logger.debug("completer: could not tell cancels among stale outcomes (%s)", exc)
            return
        for f in stale:
            f.cancelled_first = f.job_id in cancelled

    async def _flush_each(self, left: list[Finalization], applied: set[int]) -> None:
        """Write ``left`` one outcome per statement, removing each from it and adding what
        took effect to ``applied``. An outcome refused on its own is dropped: its job stays
        ``running`` under a lease nobody renews, and the rescuer returns it (at least
        once). A connection error propagates; the caller retries from where it stopped."""
        while left:
            try:
                applied |= await self._flush(left[:1], ride=False)
            except _REFUSED as exc:
                left[0].dropped = True
                logger.error(
                    "completer: dropping the outcome of job %s, refused by the database (%s); "
                    "the job will be rescued and run again", left[0].job_id, fault(exc),
                    extra={"event": "outcome_dropped", "job_id": left[0].job_id},
                )  # fmt: skip
            del left[0]

    async def _flush(self, batch: list[Finalization], *, ride: bool = True) -> set[int]:
        """Write ``batch``; with ``ride``, claim in the same statement for every rider that
        reserves permits now (ADR 0012). Returns the ids of the outcomes that took effect."""
        rides = self._reserve_rides() if ride else []
        params = {
            "outcomes": json.dumps([f.record() for f in batch]),
            "synchronous_commit": self._synchronous_commit,
            "claims": json.dumps([res.request() for _, res in rides]) if rides else None,
        }
        try:
            async with self._lane.connection(self._pool) as conn:
                fetched = await _FINALIZE_MANY.fetch(conn, params, write_rows)
            rows: list[WriteRow] = fetched.rows
            sizes = args_sizes(fetched) if rides else []
        except BaseException:
            for rider, reservation in rides:
                rider.ride_failed(reservation)
            raise
        applied = {row.job_id for row in rows if row.applied and row.job_id is not None}
        for rider, reservation in rides:
            mine = [(r, n) for r, n in zip(rows, sizes, strict=True)
                    if r.claim_queue == reservation.queue]  # fmt: skip
            jobs = [r.job for r, _ in mine if r.job is not None]
            job_sizes = [n for r, n in mine if r.job is not None]
            hold = next((r.hold for r, _ in mine if r.hold is not None), None)
            rider.rode(reservation, jobs, hold, job_sizes)
        return applied

    def _reserve_rides(self) -> list[tuple[Rider, Reservation]]:
        """Each rider's reservation for a claim riding on the next write; in the weighted
        pool, the neediest reserves first."""
        riding = [rider for rider in self._riders if rider.rides_next()]
        if self._by_need is not None and len(riding) > 1:
            riding.sort(key=self._by_need)
        return [(rider, res) for rider in riding if (res := rider.ride()) is not None]

    def ride_with(self, riders: Sequence[Rider], pool: OverflowPool | None = None) -> None:
        """Let ``riders`` (the dispatchers) claim on every write (ADR 0012). With the
        weighted mode's ``pool``, they reserve its permits neediest first
        (:meth:`OverflowPool.urgency`): in a fixed order, the first kept the rounding slack."""
        self._riders = list(riders)
        if pool is not None:
            self._by_need = lambda rider: pool.urgency(rider.queue)

    def write_pending(self) -> bool:
        """True while outcomes wait to be written: a write (and its riding claims) follows."""
        return bool(self._pending)

    def _account(self, batch: list[Finalization], applied: list[Finalization]) -> None:
        self.flushes += 1
        if self._waiters:
            for item in batch:
                waiter = self._waiters.get(id(item))
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
        self.applied += len(applied)
        if len(applied) < len(batch):
            stale = _others(batch, applied)  # (with the dropped: their spans end too)
            dropped = sum(f.dropped for f in stale)
            self.stale += len(stale) - dropped
            self.dropped += dropped
            logger.debug("completer: %d stale outcome(s) not applied", len(stale))
            self._observer.outcomes_stale(stale)
        if applied:
            self._observer.outcomes_applied(applied)
            if self._observer.needs_durable():
                if self.durable is None:  # a synchronous commit is durable when it returns
                    self._observer.outcomes_durable(applied)
                else:
                    self.durable.committed(applied)


def _took_effect(batch: list[Finalization], applied_ids: set[int]) -> list[Finalization]:
    """The outcomes of ``batch`` the write applied, in batch order. The write names jobs,
    not attempts, and a batch may hold a stale outcome of a job beside its current
    attempt's: of one job's outcomes only the latest lease can have applied (leases only
    grow). By id alone the stale one counted as applied too — a completed hook fired for
    a job that had only been retried (a review)."""
    latest: dict[int, Finalization] = {}
    for f in batch:
        if f.job_id in applied_ids:
            held = latest.get(f.job_id)
            if held is None or f.run_lease > held.run_lease:
                latest[f.job_id] = f
    return [f for f in batch if latest.get(f.job_id) is f]


def _others(batch: list[Finalization], these: list[Finalization]) -> list[Finalization]:
    """``batch`` less ``these`` (by identity: two outcomes of one job may compare equal)."""
    taken = {id(f) for f in these}
    return [f for f in batch if id(f) not in taken]
