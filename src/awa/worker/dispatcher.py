"""One dispatcher per queue: permits → rate tokens → claim → launch (design record 011).

A dispatcher sleeps until it is woken — by a ``LISTEN`` notice for its queue, by a permit
coming back, by a change of its control state (the worker's control refresher applies
overrides and fleet limits beside this loop) — or until its poll interval passes. Each
poll then:

1. reserves permits without waiting (local first, then overflow);
2. takes rate-limit tokens for at most that many jobs;
3. claims at most that many jobs (and at most ``claim_batch_size``) in ONE statement —
   through the fleet's claim locks when fleet limits or the fleet pool cover the queue
   (ADR 0010), which may hold some or all of them back;
4. releases the permits and refunds the tokens the claim did not use;
5. clears its overflow demand when it could not use every permit (few or no jobs
   found, or rate-limited), so it stops weighing on the other queues' shares;
6. launches each job with exactly one permit.

It polls again at once while claims come back full, so a backlog drains at the speed
of the handlers, and goes back to sleep when the queue is empty or permits run out. Held
back by the fleet, it waits for a freed-slot notice (or the next rate token), not for
notices of new jobs, which could not change the answer. A queue found empty goes *idle*:
it sends no statement of its own until woken — by a notice, or by the worker's idle
prober, which checks every idle queue of the worker in one statement per poll interval
(ADR 0011), so a thousand idle queues cost what one does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from awa.db import sql
from awa.db.direct import DirectStatement
from awa.db.lane import ConnectionLane
from awa.db.pool import Pool
from awa.db.rows import FleetHold, claim_rows
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService
from awa.types import Job
from awa.worker.args_budget import ArgsBudget, args_sizes
from awa.worker.claiming import Reservation
from awa.worker.control import QueueControl
from awa.worker.executor import Executor
from awa.worker.observe import Observer
from awa.worker.permits import Grant, QueuePermits

logger = logging.getLogger("awa")

_MAX_ERROR_BACKOFF_S = 5.0
# Run straight through libpq: the claim is the hot path's most frequent statement.
_CLAIM_AVAILABLE = DirectStatement("job_claim_available", sql.JOB_CLAIM_AVAILABLE)
# A plain queue whose claims can never exceed this many jobs claims by riding on the
# completer's writes (ADR 0036): for a claim this small, a statement of its own costs the
# server more than running it beside the write saves.
RIDE_AT_MOST = 16
_PARTITION_RECHECK_S = 0.02
_DEAF_TO_NEW_JOBS = frozenset({"concurrency", "pool", "rate"})
_WAITING_FOR_FREED = frozenset({"concurrency", "pool"})
# The fleet pool's answer when this process already runs its part of the member's share
# (ADR 0038): reported as a ``pool`` hold, but a slot freed elsewhere cannot change it.
_AT_POOL_PART = "pool_part"


def _claimed_at(job: Job[Any], clock_offset_s: float = 0.0) -> float:
    """When ``job`` was claimed, on this process's monotonic clock. A handed-over job was
    claimed at its insert's commit (``attempted_at``, the database's clock), which may be
    long before its notice is read here — after this process was frozen, say — and an old
    claim is checked again before its handler starts (Executor._may_start). The age is
    read on the database's clock: this host's plus ``clock_offset_s`` (the database's
    minus this host's, as the seater measured it); never later than now."""
    if job.attempted_at is None:
        return time.monotonic()
    age = max(0.0, time.time() + clock_offset_s - job.attempted_at.timestamp())
    return time.monotonic() - age


class Dispatcher(LoopService):
    """Claims and launches the jobs of one queue.

    Stopping ends claiming; a poll in progress gets ``stop_grace_s`` to launch what it
    claimed (jobs already launched keep running).
    """

    stop_grace_s = 5.0

    def __init__(
        self,
        queue: str,
        pool: Pool,
        permits: QueuePermits,
        control: QueueControl,
        executor: Executor,
        observer: Observer | None = None,
        *,
        args_budget: ArgsBudget | None = None,
        instance_id: str | None = None,
        claim_lane: ConnectionLane,
    ) -> None:
        super().__init__(f"dispatch-{queue}")
        self.queue = queue
        self._instance_id = instance_id  # named in a pool member's claims (ADR 0037)
        self._pool = pool
        # Shared by the worker's dispatchers: one held connection for claims (ADR 0048).
        self._claim_lane = claim_lane
        self.permits = permits
        self.control = control
        self._executor = executor
        self._observer = observer or Observer()
        self._wakeup = asyncio.Event()
        self.claimed = 0
        self.polls = 0
        self.fleet_holds = 0
        self.rides = 0  # claims made by riding on the completer's writes
        self._draining = False  # inside a poll: a claim may be on its way
        self._write_pending: Callable[[], bool] = lambda: False
        self.blocked: str | None = None  # why the fleet held the last claim back
        self.at_pool_part = False  # held back because this process runs its part (ADR 0038)
        self._not_before = 0.0  # monotonic time before which asking the fleet is pointless
        # A partition hold: when the soonest token of a key held by its bucket comes (0 =
        # no such key). Looked again for then, sooner than a poll, but not waited for.
        self._key_token_at = 0.0
        # The local token bucket, not the work, ended the last claim: jobs are waiting, and
        # the next poll is due with the next token, however far the poll interval is.
        self._token_bound = False
        # Idle: the last claim found the queue empty, and the idle prober watches it. A
        # dispatcher starts idle and due, so a worker's first look at all its queues is
        # one probe, not one claim per queue.
        self.idle = True
        self.probe_due = 0.0  # when the idle prober should next look at this queue
        self._on_idle: Callable[[], None] | None = None
        self._on_busy: Callable[[str], None] | None = None
        self._on_rest: Callable[[str], bool] | None = None
        self.handoffs = 0  # jobs handed over at their insert's commit (ADR 0045)
        permits.subscribe(self.wake_permit)
        self._args_budget = args_budget or ArgsBudget(max_bytes=2**62)  # shared per process
        self._args_budget.subscribe(self.wake)

    def _on_stop(self) -> None:
        self._wakeup.set()

    def watch_idle(self, on_idle: Callable[[], None]) -> None:
        """Call ``on_idle`` whenever this queue goes idle (the idle prober's cue)."""
        self._on_idle = on_idle

    def watch_seats(self, on_busy: Callable[[str], None], on_rest: Callable[[str], bool]) -> None:
        """Handoff seats (ADR 0045): call ``on_busy(queue)`` whenever this queue stops
        being idle (a busy queue claims in batches: its seats come back), and
        ``on_rest(queue)`` whenever it rests idle with permits free — after a claim that
        ran dry, or when a permit comes back; ``on_rest`` returns True when the permit
        goes to a seat, so an idle queue makes no claim for it."""
        self._on_busy, self._on_rest = on_busy, on_rest

    def take_handoff(
        self, job: Job[Any], grant: Grant, deadline_ms: int, size: int, clock_offset_s: float
    ) -> None:
        """Launch ``job``, claimed for this worker at its insert's commit, with the one
        permit of ``grant`` (its handoff seat's, ADR 0045); ``clock_offset_s``: the
        database's clock minus this host's."""
        (permit,) = self.permits.split(grant, 1)
        self.claimed += 1
        self.handoffs += 1
        self._observer.polled(self.queue, 1, False)  # claimed, as a claim's jobs count
        self._args_budget.observe([size])
        permit.also_release(self._args_budget.hold(size))
        self._executor.launch(job, permit, deadline_ms, _claimed_at(job, clock_offset_s))

    def wake(self) -> None:
        """Poll as soon as possible (permits came back, the queue's control changed, or the
        idle prober saw jobs)."""
        self._wakeup.set()

    def control_changed(self) -> None:
        """The queue's control row changed (an override, a pause, its fleet limits or pool
        membership): a hold the fleet gave under the old settings, and the wait it named,
        no longer stand, so the next claim asks afresh (CONTRACT §8: changes apply within
        one refresh cadence, however far away the old limit's next token was)."""
        self._not_before = 0.0
        self._key_token_at = 0.0
        self.blocked = None
        self.at_pool_part = False
        if self.idle:  # its next probe follows a poll_interval_ms override at once
            next_probe = time.monotonic() + self.control.poll_sleep_s
            if next_probe < self.probe_due:
                self.probe_due = next_probe
                if self._on_idle is not None:
                    self._on_idle()
        self._wakeup.set()

    def recheck(self) -> None:
        """Notices may have been missed (the listener reconnected): an idle queue is
        looked at by the next probe, a busy one polls at once."""
        if self.idle:
            self.probe_due = 0.0
            if self._on_idle is not None:
                self._on_idle()
        else:
            self._wakeup.set()

    def ride_on(self, write_pending: Callable[[], bool]) -> None:
        """``write_pending()`` says the completer has outcomes to write: a permit freed
        then is claimed by riding on that write (ADR 0012), not by a claim of its own."""
        self._write_pending = write_pending

    def wake_permit(self) -> None:
        """A permit came back. For a queue with work that rides on writes, the job's
        outcome is on its way to the completer, whose write claims for it (ADR 0012):
        nothing to do here. Ignored too while the fleet holds this queue back on its cap
        or pool share: the job still counts as running until its outcome is written, and
        the ``freed`` notice comes then."""
        if self.blocked in _WAITING_FOR_FREED or (
            self.rides_on_writes and not self.idle and self._write_pending()
        ):
            return
        if self.idle and self._on_rest is not None and self._on_rest(self.queue):
            return  # an idle queue's free permit is parked as a handoff seat instead
        self._wakeup.set()

    def wake_available(self) -> None:
        """Jobs became available. Ignored while the fleet holds this queue back on a cap
        or a token: new jobs cannot change that answer, a freed slot or time will."""
        if self.blocked not in _DEAF_TO_NEW_JOBS:
            self._wakeup.set()

    def wake_freed(self) -> None:
        """A job of this queue (or of a fleet-pool member) left ``running`` somewhere.
        Ignored while this process runs its part of a pool member's share: its own
        completions re-fill its slots through the claims riding on them (ADR 0038)."""
        if self.at_pool_part:
            return
        if self.blocked != "rate":
            self._not_before = 0.0
        self._wakeup.set()

    # -- loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        error_backoff = 0.05
        while not self.stopping:
            await self._sleep()  # at once when woken; idle (as at start) until then
            if self.stopping:
                return
            try:
                await self._drain()
                self.healthy = True
                error_backoff = 0.05
            except Exception as exc:  # database trouble: back off, then try again
                self.healthy = False
                logger.warning(
                    "dispatcher %s: %s; retrying in %.2fs", self.queue, fault(exc), error_backoff,
                    extra={"event": "dispatcher_error", "queue": self.queue},
                    exc_info=traceback_unless_expected(exc),
                )  # fmt: skip
                await asyncio.sleep(error_backoff)
                error_backoff = min(error_backoff * 2, _MAX_ERROR_BACKOFF_S)
                self._wakeup.set()  # try again at once after the backoff

    async def _sleep(self) -> None:
        await self._wait(self._sleep_seconds())

    def _sleep_seconds(self) -> float | None:
        """How long to sleep unless woken: None when idle (the idle prober or a notice
        wakes it), else the poll interval (at most the refresh cadence), or until the next
        local or fleet token when a token is what holds the claims back."""
        if self.idle:
            return None
        now = time.monotonic()
        timeout = self.control.poll_sleep_s
        bucket = self.control.bucket
        if bucket is not None:
            # Waiting a whole poll interval would let a small burst overflow and the rate
            # go unused (burst 1 at 100/s ran 5 jobs/s at 200 ms polls).
            next_token = bucket.seconds_until(1)
            timeout = next_token if self._token_bound else max(timeout, next_token)
        # The fleet's tokens (a times still ahead: one passed while no permit was free is
        # no reason to wake; a permit's return does that). Asked for again before the
        # bucket is full, or the rate goes unused (20/s with burst 2 ran 10/s at 200 ms
        # polls), but not at every token (each worker claiming at each token).
        if self.blocked == "rate" and self._not_before > now:
            wait = self._not_before - now
            timeout = max(wait, min(timeout, wait + self._refill_s()))
        elif self.blocked == "partition" and self._key_token_at > now:
            wait = self._key_token_at - now
            timeout = max(_PARTITION_RECHECK_S, min(timeout, wait + self._refill_s()))
        elif self._not_before > now:  # other holds wait at least a poll
            timeout = max(timeout, self._not_before - now)
        return timeout

    def _refill_s(self) -> float:
        """How long the fleet bucket (a key's, for a partitioned queue) takes from one
        token to full."""
        limits = self.control.limits
        if limits is None or limits.rate_limit is None or limits.effective_burst is None:
            return 0.0
        return max(limits.effective_burst - 1, 0) / limits.rate_limit

    async def _wait(self, timeout: float | None) -> None:
        if self._wakeup.is_set():
            self._wakeup.clear()
            return
        try:
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()
        except TimeoutError:
            pass
        self._wakeup.clear()

    async def _drain(self) -> None:
        self._draining = True
        try:
            while not self.stopping:
                full = await self.poll_once()
                if not full:
                    return
        finally:
            self._draining = False

    @property
    def at_rest(self) -> bool:
        """Idle, with no poll under way or pending: only the idle prober or a notice can
        make it claim now."""
        return self.idle and not self._draining and not self._wakeup.is_set()

    async def poll_once(self) -> bool:
        """One permit → token → claim → launch cycle; True when the claim came back full."""
        self.polls += 1
        reservation = self._reserve()
        if reservation is None:
            return False
        try:
            jobs, hold, sizes = await self._claim(reservation)
        except BaseException:
            self._give_back(reservation)
            raise
        return self._settle(reservation, jobs, hold, sizes)

    # -- claims riding on the completer's writes (ADR 0012) ---------------------------

    def ride(self) -> Reservation | None:
        """The completer is about to write outcomes: reserve for a claim riding on that
        statement. Only a queue that ``rides_on_writes`` rides, and only with work (not
        idle); a larger plain queue's claim overlaps the write on its own connection."""
        if not self.rides_next():
            return None
        return self._reserve()

    def rides_next(self) -> bool:
        """True when this queue's next claim rides on the completer's next write: it
        rides on writes, has work (not idle) and its loop runs (``stopping`` speaks only
        for the loop's own task)."""
        return self.alive and not self.idle and self.rides_on_writes

    @property
    def rides_on_writes(self) -> bool:
        """True when this queue's claims ride on the completer's writes: under fleet
        limits or in the fleet pool (ADR 0012), or too small to be worth a statement of
        their own (ADR 0036)."""
        return self.control.coordinated or self.permits.ceiling <= RIDE_AT_MOST

    def rode(
        self,
        reservation: Reservation,
        jobs: list[Job[Any]],
        hold: FleetHold | None,
        sizes: list[int],
    ) -> None:
        """The riding claim came back: launch its jobs; a full claim means more wait, so
        the dispatcher polls again at once."""
        self.rides += 1
        self._held_back(hold)
        if self._settle(reservation, jobs, hold, sizes):
            self._wakeup.set()

    def ride_failed(self, reservation: Reservation) -> None:
        """The write failed: give back what was reserved; the next poll tries again."""
        self._give_back(reservation)
        self._wakeup.set()

    # -- the steps ----------------------------------------------------------------------

    def _reserve(self) -> Reservation | None:
        """Permits first, then rate tokens for at most that many jobs (design record 011)."""
        if self._not_before > time.monotonic():
            return None  # the fleet said when to ask again (the next rate token)
        control = self.control
        if control.paused:  # as last refreshed; the claim itself re-checks in the database
            self._note_idle(ran_dry=True)
            self.permits.clear_demand()  # a paused queue does not contend for overflow
            return None
        wanted = self._args_budget.claimable(control.claim_batch_size)
        grant = self.permits.try_acquire(wanted)
        if grant.total == 0:
            # No permit: a permit's return wakes this dispatcher, not the next token (in
            # weighted mode, with another queue holding the overflow, polling at each
            # token of a local bucket spun at 100 % CPU).
            self._token_bound = False
            # Polled with work in sight (a notice, the idle prober), it now waits for
            # permits, not jobs: no longer idle, its claims ride on the writes that free
            # them, in the pool's neediest-first order. Left idle, a weighted queue lost
            # every freed permit to the riding claims of the queues beside it, and ran
            # almost nothing (a review: 0-4 jobs in 12 s where ~10 were due).
            self._note_idle(ran_dry=False)
            return None
        allowed = grant.total
        bucket = control.bucket
        if bucket is not None:
            allowed = bucket.take(allowed)
            if allowed == 0:
                self._token_bound = True
                self.permits.release(grant, wake_self=False)
                self.permits.clear_demand()
                self._observer.polled(self.queue, 0, True)
                return None
        room = self._args_budget.reserve(allowed)
        reservation = Reservation(
            self.queue, grant, allowed, wanted, control.deadline_ms, room, time.monotonic()
        )
        if control.pool_member is not None:
            reservation.instance = self._instance_id
            reservation.held = self.permits.in_flight
        return reservation

    def _give_back(self, reservation: Reservation) -> None:
        self._args_budget.unreserve(reservation.args_bytes)
        self.permits.release(reservation.grant, wake_self=False)
        if self.control.bucket is not None:
            self.control.bucket.refund(reservation.limit)

    def _settle(
        self,
        reservation: Reservation,
        jobs: list[Job[Any]],
        hold: FleetHold | None,
        sizes: list[int],
    ) -> bool:
        """Refund what the claim did not use, launch each job with one permit (and its
        args charged to the process's ArgsBudget, given back with the permit); True when
        the claim came back full (more jobs are likely waiting)."""
        grant, allowed = reservation.grant, reservation.limit
        self._args_budget.unreserve(reservation.args_bytes)
        if self.control.bucket is not None:
            self.control.bucket.refund(allowed - len(jobs))
        self._token_bound = allowed < grant.total and len(jobs) == allowed > 0
        self._note_idle(ran_dry=len(jobs) < allowed and hold is None)
        permits = self.permits.split(grant, len(jobs))
        if self.idle and self._on_rest is not None:
            self._on_rest(self.queue)
        self._observer.polled(self.queue, len(jobs), allowed < grant.total)
        if len(jobs) < grant.total:
            # Drained or rate-limited: it asks for no more until its next poll (ADR 0005).
            self.permits.clear_demand()
        if not jobs:
            return False
        self.claimed += len(jobs)
        self._args_budget.observe(sizes)
        for job, permit, size in zip(jobs, permits, sizes, strict=True):
            permit.also_release(self._args_budget.hold(size))
            self._executor.launch(job, permit, reservation.deadline_ms, reservation.claimed_at)
        return len(jobs) == allowed and allowed == reservation.wanted

    async def _claim(
        self, reservation: Reservation
    ) -> tuple[list[Job[Any]], FleetHold | None, list[int]]:
        """The claimed jobs, the fleet's hold (if any), and each job's args size in bytes
        (for the ArgsBudget)."""
        # Committed asynchronously whatever the worker's durability (ADR 0043): a claim
        # forgotten in a crash is the crash before the claim, and an outcome committed
        # synchronously flushes the WAL of the claim it follows.
        params = {**reservation.request(), "synchronous_commit": "off"}
        async with self._claim_lane.connection(self._pool) as conn:
            fetched = await _CLAIM_AVAILABLE.fetch(conn, params, claim_rows)
        rows, row_sizes = fetched.rows, args_sizes(fetched)
        jobs: list[Job[Any]] = []
        sizes: list[int] = []
        hold: FleetHold | None = None
        for row, size in zip(rows, row_sizes, strict=True):
            if isinstance(row, FleetHold):
                hold = row
            else:
                jobs.append(row)
                sizes.append(size)
        self._held_back(hold)
        return jobs, hold, sizes

    def _note_idle(self, *, ran_dry: bool) -> None:
        if ran_dry and not self.idle:
            self.idle = True
            self.probe_due = time.monotonic() + self.control.poll_sleep_s
            if self._on_idle is not None:
                self._on_idle()
        elif not ran_dry and self.idle:
            self.idle = False
            if self._on_busy is not None:
                self._on_busy(self.queue)

    def _held_back(self, hold: FleetHold | None) -> None:
        """Remember why the fleet held the last claim back, and when to ask again."""
        self._not_before = 0.0
        self._key_token_at = 0.0
        self.at_pool_part = hold is not None and hold.reason == _AT_POOL_PART
        if hold is None:
            self.blocked = None
            return
        self.blocked = "pool" if self.at_pool_part else hold.reason
        self.fleet_holds += 1
        self._observer.fleet_held(self.queue, self.blocked)
        if hold.reason == "partition":
            # Other keys may get jobs any moment (no head-of-line blocking), but a burst of
            # notices for a key at its limit must not turn into a burst of claims.
            self._not_before = time.monotonic() + _PARTITION_RECHECK_S
            if hold.retry_in_ms is not None and hold.retry_in_ms < 0:  # migration 0026
                self._key_token_at = time.monotonic() - hold.retry_in_ms / 1000
        elif hold.retry_in_ms is not None:  # a rate limit: no token before then
            self._not_before = time.monotonic() + hold.retry_in_ms / 1000
