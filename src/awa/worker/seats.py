"""Handoff seats: an idle queue's free permits, parked where an insert can use them.

Picking up a job used to take a round trip after its insert committed: the notice wakes
the dispatcher, the dispatcher claims, the handler starts. At a trickle that claim is
most of the latency (docs/benchmarks.md, W2). With seats (ADR 0045, migration 0015) an
idle queue parks up to ``handoff_seats`` of its free permits in ``awa.handoff_seats``; a
single insert of a job for the queue takes one, the job is claimed for this worker as
the insert commits, and the commit's notice on this worker's own channel carries the
claimed row. The handler starts on the notice: no claim of its own.

Permit before claim holds throughout: a seat is a permit reserved here before any job
can be claimed for it; the notice gives the permit to the job, or back (the seat went
unused: the queue was paused, the job was too large for a notice...). Seats are only for
queues that claim the plain way — no rate limit, fleet limit or pool membership, not
paused — and only while idle: a queue that turns busy gets its seats back and claims
in batches again, leaving one permit out of the seats so that it always can.

Seats lapse unless renewed, so a worker that dies stops taking jobs within
``SEAT_TTL_MS``; a job handed to it in that window is returned by the rescuer once its
heartbeat is stale, as any job of a dead worker. Notices lost while LISTEN reconnects
are made good by a resync: free seats are released and consumed ones forgotten.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.db.rows import job_from_row
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService
from awa.types import Job
from awa.worker.dispatcher import Dispatcher
from awa.worker.permits import Grant

logger = logging.getLogger("awa")

SEAT_TTL_MS = 15_000
RENEW_EVERY_S = SEAT_TTL_MS / 3000
_ERROR_BACKOFF_S = 1.0
# At shutdown, how long the release of the free seats may take (they lapse anyway).
RELEASE_AT_STOP_S = 2.0


def channel_for(instance_id: str) -> str:
    """The notice channel of one worker's seats (an identifier: no dashes)."""
    return "awa_handoff_" + instance_id.replace("-", "")


@dataclass(slots=True)
class Seat:
    """One parked permit of ``queue``."""

    queue: str
    grant: Grant
    deadline_ms: int


class Seater(LoopService):
    """Parks, renews and releases the seats of a worker's idle queues."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        dispatchers: Mapping[str, Dispatcher],
        channel: str,
        per_queue: int,
        listening: Callable[[], bool],
        listener_pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__("handoff-seats")
        self._pool = pool
        self._dispatchers = dispatchers
        self.channel = channel
        self.per_queue = per_queue
        self._listening = listening  # seats only while this worker hears its channel
        self._listener_pid = listener_pid  # whose liveness producers check before a handoff
        self._tasks: set[asyncio.Task[None]] = set()
        self.seats: dict[int, Seat] = {}
        # Seats forgotten by a resync while their notice may still be on its way: a
        # notice naming one is still ours (its queue, and the monotonic time of the resync).
        self._forgotten: dict[int, tuple[str, float]] = {}
        # Seats the last renewal did not find (consumed, their notice not read yet).
        self._missing: set[int] = set()
        # A park is under way: its seats can be taken (and their notices read) before
        # its statement's answer names them here. Unknown seats' notices wait for it.
        self._parking = 0
        self._early: list[str] = []
        self._dirty: set[str] = set(dispatchers)
        self._stale: set[str] = set()  # queues whose seats must come back first
        self._changed = asyncio.Event()
        self._resync_due = False
        self._renewed_at = time.monotonic()
        # The database's clock minus this host's (seconds), learned at each park: a
        # handed-over job's claim is stamped by the database, and its age read with a
        # host clock minutes off skipped (or always made) the re-check of an old claim.
        self.clock_offset_s = 0.0
        for dispatcher in dispatchers.values():
            dispatcher.watch_seats(self.mark, self.rest)

    def parked(self) -> dict[str, int]:
        """Permits parked in seats now, per queue (free for a handoff at once)."""
        counts: dict[str, int] = {}
        for seat in self.seats.values():
            counts[seat.queue] = counts.get(seat.queue, 0) + seat.grant.total
        return counts

    # -- events (called from the event loop's callbacks) ----------------------------

    def mark(self, queue: str) -> None:
        """``queue``'s seats may be due for a change (it went idle or busy, its control
        changed, a seat of it was used)."""
        self._dirty.add(queue)
        self._changed.set()

    def refresh(self, queue: str) -> None:
        """``queue``'s control changed: its seats carry the old deadline, so they come
        back and are parked again (if it may still have them)."""
        self._stale.add(queue)
        self.mark(queue)

    def rest(self, queue: str) -> bool:
        """``queue`` rests idle with permits free: top its seats up. True when it may
        have seats (a permit coming back then goes to one, not to a claim)."""
        self.mark(queue)
        return self.alive and self._may_park(self._dispatchers[queue])

    def mark_all(self) -> None:
        """Every queue's seats may be due for a change."""
        self._dirty.update(self._dispatchers)
        self._changed.set()

    def resync(self) -> None:
        """The LISTEN connection (re)connected: notices sent meanwhile are lost."""
        if self.seats:
            self._resync_due = True
        self.mark_all()

    def _on_stop(self) -> None:
        self._changed.set()

    def on_notice(self, payload: str) -> None:
        """A seat of this worker was used: its job, claimed for us, or nothing."""
        try:
            message = json.loads(payload)
            seat_id = int(message["seat"])
            row = message.get("job")
            job = None if row is None else _job_from(row)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("handoff: ignoring a malformed notice (%s)", exc)
            return
        seat = self.seats.pop(seat_id, None)
        if seat is None and seat_id not in self._forgotten and self._parking:
            self._early.append(payload)  # maybe a seat of the park under way: after it
            return
        forgotten = self._forgotten.pop(seat_id, None)
        queue = seat.queue if seat is not None else forgotten[0] if forgotten else None
        if queue is None or (job is not None and job.queue != queue):
            # Not a seat this worker parked (or not for that queue): anyone who may
            # NOTIFY could have sent it. Running it, or giving its job back, would act
            # on a job nobody handed us.
            if seat is not None:
                self.seats[seat_id] = seat
            logger.warning(
                "handoff: ignoring a notice for seat %s, which this worker did not park "
                "for that queue", seat_id, extra={"event": "handoff_notice_refused"},
            )  # fmt: skip
            return
        if job is None or row is None:
            if seat is not None:
                self._give_permit_back(seat)
            return
        dispatcher = self._dispatchers.get(job.queue)
        grant = seat.grant if seat is not None else None
        if dispatcher is not None and grant is None and self.alive:
            # The seat was already given back (a resync raced the notice): run the job
            # with a permit of its own if one is free.
            spare = dispatcher.permits.try_acquire(1)
            if spare.total == 1:
                grant = spare
            elif spare.total:
                dispatcher.permits.release(spare, wake_self=False)
        if dispatcher is None or grant is None or not self.alive or not dispatcher.alive:
            if grant is not None and dispatcher is not None:
                dispatcher.permits.release(grant, wake_self=False)
            self._spawn(self._give_back(job))
            return
        deadline_ms = seat.deadline_ms if seat is not None else dispatcher.control.deadline_ms
        dispatcher.take_handoff(
            job, grant, deadline_ms, len(json.dumps(row["args"])), self.clock_offset_s
        )
        self.mark(job.queue)

    # -- the loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        while not self.stopping:
            try:
                async with asyncio.timeout(RENEW_EVERY_S):
                    await self._changed.wait()
            except TimeoutError:
                pass
            self._changed.clear()
            if self.stopping:
                break
            try:
                await self._tend()
            except Exception as exc:
                logger.warning(
                    "handoff seats: %s; retrying in %.1fs", fault(exc), _ERROR_BACKOFF_S,
                    exc_info=traceback_unless_expected(exc),
                )  # fmt: skip
                await asyncio.sleep(_ERROR_BACKOFF_S)
                self._changed.set()

    async def _after_stop(self) -> None:
        """Release every free seat; a seat taken by a transaction still open notifies us at
        its commit, and that job is given back. Bounded: with the database unreachable a
        release waited the pool's 30 s for a connection, outside the shutdown's bound and
        ahead of another client's shutdown in the same process (a review); unreleased
        seats lapse by themselves."""
        if self.seats:
            try:
                async with asyncio.timeout(RELEASE_AT_STOP_S):
                    await self._release(list(self.seats))
            except Exception as exc:  # TimeoutError too
                reason = fault(exc)
                logger.warning("handoff seats: could not release them (%s); they lapse", reason)

    async def _tend(self) -> None:
        if self._resync_due:
            self._resync_due = False
            await self._resync()
        dirty, self._dirty = self._dirty, set()
        wanted: list[tuple[str, int, Grant]] = []
        leaving: list[int] = []
        for queue in dirty:
            dispatcher = self._dispatchers[queue]
            mine = [i for i, s in self.seats.items() if s.queue == queue]
            if queue in self._stale or not self._may_park(dispatcher):
                leaving += mine
                continue
            missing = self.per_queue - len(mine)
            # One permit always stays out of the seats, so the queue can still claim.
            room = min(missing, dispatcher.permits.available - 1)
            if room > 0:
                grant = dispatcher.permits.try_acquire(room)
                if grant.overflow:  # seats take the queue's own permits only
                    dispatcher.permits.release(Grant(overflow=grant.overflow), wake_self=False)
                    grant = Grant(local=grant.local)
                dispatcher.permits.clear_demand()
                if grant.local:
                    wanted.append((queue, dispatcher.control.deadline_ms, grant))
        try:
            if leaving:
                await self._release(leaving)
        except BaseException:
            # Nothing parked this round: the permits set aside go back, the queues stay due.
            for queue, _, grant in wanted:
                self._dispatchers[queue].permits.release(grant, wake_self=False)
            self._dirty |= dirty
            raise
        refreshed = self._stale & dirty
        if refreshed:  # their seats are back: parked again next round
            self._stale -= refreshed
            self._dirty |= refreshed
            self._changed.set()
        if wanted:
            try:
                await self._park(wanted)  # gives the permits back itself if it fails
            except BaseException:
                self._dirty |= {queue for queue, _, _ in wanted}
                raise
        if self.seats and time.monotonic() - self._renewed_at >= RENEW_EVERY_S:
            await self._renew()

    def _may_park(self, dispatcher: Dispatcher) -> bool:
        control = dispatcher.control
        return (
            self.per_queue > 0
            and self._listening()
            and dispatcher.alive
            and dispatcher.idle
            and dispatcher.permits.pool is None  # hard-reserved: seats never skew shares
            and not control.paused
            and not control.coordinated
            and control.bucket is None
            and control.pool_member is None
        )

    async def _park(self, wanted: list[tuple[str, int, Grant]]) -> None:
        queues = [queue for queue, _, grant in wanted for _ in range(grant.local)]
        deadlines = [ms for _, ms, grant in wanted for _ in range(grant.local)]
        params = {
            "channel": self.channel,
            "ttl_ms": SEAT_TTL_MS,
            "queues": queues,
            "deadline_ms": deadlines,
            "listener_pid": self._listener_pid(),
        }
        self._parking += 1
        try:
            async with self._pool.connection() as conn:
                sent = time.time()
                cur = await conn.execute(sql.SEATS_PARK, params)
                rows = await cur.fetchall()
                answered = time.time()
        except BaseException:
            for queue, _, grant in wanted:
                self._dispatchers[queue].permits.release(grant, wake_self=False)
            raise
        else:
            deadline_of = {queue: ms for queue, ms, _ in wanted}
            for seat_id, queue, _ in rows:
                self.seats[seat_id] = Seat(queue, Grant(local=1), deadline_of[queue])
            if rows:  # the statement ran between the two readings: its midpoint
                self.clock_offset_s = rows[0][2] - (sent + answered) / 2
        finally:
            self._parking -= 1
            if not self._parking:
                early, self._early = self._early, []
                for payload in early:  # now known, or refused
                    self.on_notice(payload)

    async def _release(self, seat_ids: list[int]) -> None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.SEATS_RELEASE, {"seats": seat_ids})
            released = [row[0] for row in await cur.fetchall()]
        for seat_id in released:
            seat = self.seats.pop(seat_id, None)
            if seat is not None:
                self._give_permit_back(seat)

    async def _renew(self) -> None:
        known = list(self.seats)
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.SEATS_RENEW, {"seats": known, "ttl_ms": SEAT_TTL_MS})
            present = {row[0] for row in await cur.fetchall()}
        self._renewed_at = time.monotonic()
        # Gone at two renewals in a row: a notice takes milliseconds, not a renewal's 5 s.
        gone = {seat_id for seat_id in known if seat_id not in present and seat_id in self.seats}
        lost, self._missing = gone & self._missing, gone - self._missing
        if lost:
            logger.warning(
                "handoff: %d seat(s) were taken and no notice of theirs came; their permits "
                "come back (is the LISTEN connection alive? their jobs run once their "
                "heartbeats are stale)", len(lost), extra={"event": "handoff_notice_missing"},
            )  # fmt: skip
            self._forget(list(lost))

    def _forget(self, seat_ids: list[int]) -> None:
        """Give back the permits of seats consumed while their notices were lost; a notice
        that still comes for one is handled as ours (see on_notice)."""
        now = time.monotonic()
        for seat_id in seat_ids:
            seat = self.seats.pop(seat_id, None)
            if seat is not None:
                self._give_permit_back(seat)
                self._forgotten[seat_id] = (seat.queue, now)
        for seat_id, (_, at) in list(self._forgotten.items()):  # no notice comes this late
            if now - at > 2 * SEAT_TTL_MS / 1000:
                del self._forgotten[seat_id]

    async def _resync(self) -> None:
        known = list(self.seats)
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql.SEATS_RESYNC, {"seats": known})
            rows = await cur.fetchall()
        pending = {seat_id for seat_id, freed in rows if not freed}
        self._forget([seat_id for seat_id in known if seat_id not in pending])

    def _give_permit_back(self, seat: Seat) -> None:
        dispatcher = self._dispatchers.get(seat.queue)
        if dispatcher is not None:
            dispatcher.permits.release(seat.grant)
        self.mark(seat.queue)

    async def _give_back(self, job: Job[Any]) -> None:
        params = {"id": job.id, "run_lease": job.run_lease, "attempted_at": job.attempted_at}
        try:
            async with self._pool.connection() as conn:
                await conn.execute(sql.SEATS_GIVE_BACK, params)
        except Exception as exc:
            logger.warning(
                "handoff: could not return job %s (%s); the rescuer returns it", job.id, exc
            )

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# The notice carries the claimed row as json: its timestamps come as ISO text, and it
# leaves out finalized_at (a claimed job is not finished) and ordering_key (none here).
_NOTICE_TIMES = ("created_at", "run_at", "attempted_at", "deadline_at")


def _job_from(row: dict[str, Any]) -> Job[Any]:
    """The claimed job, as the commit's notice carries it."""
    times = {name: _when(row[name]) for name in _NOTICE_TIMES}
    return job_from_row({**row, **times, "finalized_at": None})


def _when(value: str | None) -> Any:
    return None if value is None else datetime.fromisoformat(value)


__all__ = ["SEAT_TTL_MS", "Seater", "channel_for"]
