"""Execution permits: a dispatcher reserves them before it claims (design record 011).

One :class:`QueuePermits` per queue serves both modes:

* hard-reserved — ``local`` = ``max_workers``, no overflow pool;
* weighted — ``local`` = ``min_workers``, plus the process-wide :class:`OverflowPool`
  of ``global_max_workers − Σ min_workers`` shared by weighted fair share.

All three numbers can change live (runtime overrides, CONTRACT §10): a resize never
takes a permit back — a queue over its new size simply gets nothing until enough of its
jobs have finished — and a resize that frees room wakes whoever may now take it. In
weighted mode a resize moves permits between a queue's minimum and the pool, so the pool
also bounds the process as a whole: local and overflow permits held together never
exceed ``global_max_workers`` (CONTRACT §7), however the minimums changed.

Everything runs on the worker's event loop thread, so plain counters suffice: no call
here ever blocks or awaits. A :class:`Permit` releases its slot exactly once.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from awa.types import Capacity, HardReserved, Weighted

Wake = Callable[[], None]


class ShareCredit:
    """What each asking queue has gone without of its exact share, over time: its weight's
    part of the permit-seconds the pool gave the asking queues since it began to ask, less
    the permit-seconds it held. A queue whose exact share is below one permit, or that lost
    the rounding slack of the ``ceil`` shares, builds credit while it waits and is asked
    first when a permit frees; one that held more than its share builds debt. O(1) per
    event: the entitlement of one unit of weight advances with the clock, and a queue's use
    is integrated whenever what it holds changes."""

    def __init__(self, queues: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._at = clock()
        self._entitled = 0.0  # permit-seconds one unit of weight was entitled to, so far
        self._used = dict.fromkeys(queues, 0.0)  # permit-seconds held, up to _used_at
        self._used_at = dict.fromkeys(queues, self._at)
        self._base = dict.fromkeys(queues, 0.0)  # the credit's zero, set as a queue asks

    def advance(self, pool: int, asking_weight: int) -> None:
        """Account for the time since the last event, under the division it had."""
        now = self._clock()
        if asking_weight > 0:
            self._entitled += (now - self._at) * pool / asking_weight
        self._at = now

    def holding(self, queue: str, held: int) -> None:
        """``queue`` held ``held`` permits until now (call before it changes)."""
        now = self._clock()
        self._used[queue] += held * (now - self._used_at[queue])
        self._used_at[queue] = now

    def restart(self, queue: str, weight: int, held: int) -> None:
        """``queue`` begins to ask (or its weight changed): its credit starts from zero."""
        self._base[queue] = 0.0
        self._base[queue] = self.credit(queue, weight, held)

    def credit(self, queue: str, weight: int, held: int) -> float:
        """Permit-seconds of its share ``queue`` went without (negative: held beyond it)."""
        used = self._used[queue] + held * (self._clock() - self._used_at[queue])
        return weight * self._entitled - used - self._base[queue]


class OverflowPool:
    """Work-conserving, weighted fair-share allocator of the shared overflow permits.

    ``held`` counts permits each queue holds now, ``demand`` what it last asked for
    (cleared when a poll could not use all it was granted), ``weights`` are fixed at
    start. A request gets ``min(wanted, available, fair_share − held)`` with
    ``fair_share = ceil(pool × weight / Σ weight of the queues with demand)``.

    With every contender asking for more, ``pool`` is the whole pool: the record's
    formula. **Beyond** the record, a queue that holds permits but asks for no more is
    not weighed as a contender; what it holds is taken out of ``pool`` instead. In the
    record its weight counts until its last permit is back, so one queue with one
    long job halves what a loaded neighbour may use while the rest of the pool idles.

    Wake-ups (**beyond** the record, which wakes only the releasing queue): whenever a
    change can let another queue take permits — permits released, or a queue ceasing
    to ask so the others' shares grow — every *other* queue with demand that is below
    its fair share is woken at once, neediest first. So a queue that becomes active
    converges as soon as the incumbents' handlers finish, not at its next poll. A
    dispatcher handing back permits it did not use never wakes itself.
    """

    def __init__(
        self,
        total: int,
        weights: dict[str, int],
        global_max: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total < 0:
            raise ValueError("overflow total must be >= 0")
        if any(weight < 1 for weight in weights.values()):
            raise ValueError("weights must be >= 1")
        self.total = total
        self._weights = dict(weights)
        self._held = dict.fromkeys(weights, 0)
        self._demand = dict.fromkeys(weights, 0)
        self._wakers: dict[str, Wake] = {}
        # Running totals, kept in step with _held and _demand: a release happens once per
        # job, so recomputing these sums there would cost more than the bookkeeping.
        self._held_total = 0  # Σ held
        self._asking_weight = 0  # Σ weight of queues with demand
        self._settled = 0  # Σ held of queues without demand
        # The process-wide bound: local permits of every queue plus the pool's, held
        # together, never above it (None: the pool alone, as built in isolation).
        self.global_max = global_max
        self._local_held = 0  # Σ local permits held by the queues sharing this pool
        # Grants counted, and each queue's last: of two queues with the same credit, the
        # one granted longer ago goes first (see urgency).
        self._grants = 0
        self._last_grant = dict.fromkeys(weights, 0)
        self._credit = ShareCredit(list(weights), clock)
        # Private switch for bench/fairness.py: False restores the record's behaviour
        # (only the releasing queue is woken) so the two can be measured side by side.
        self._wake_others = True

    def subscribe(self, queue: str, wake: Wake) -> None:
        """Call ``wake`` when ``queue`` may be granted permits it asked for."""
        self._wakers[queue] = wake

    def resize(self, total: int) -> None:
        """A new pool size (Σ min_workers or global_max_workers changed live). Permits held
        beyond it stay held until released; nothing new is granted until then."""
        grew = total > self.total
        self._settle_credits()
        self.total = max(total, 0)
        if grew:
            self._wake_waiting(exclude="")

    def set_weight(self, queue: str, weight: int) -> None:
        """A new weight for ``queue`` (a live override); shares change from the next grant."""
        if weight < 1:
            raise ValueError("weights must be >= 1")
        self._settle_credits()
        old, self._weights[queue] = self._weights[queue], weight
        if old != weight and self._demand[queue] > 0:
            self._asking_weight += weight - old
            self._credit.restart(queue, weight, self._charged(queue))
            self._wake_waiting(exclude="")

    @property
    def available(self) -> int:
        """Permits nobody holds (never negative, even while shrunk below what is held),
        and no more than the process-wide room: after a minimum shrank live, its queue's
        permits still held above it count against the pool that grew by as much."""
        return max(0, min(self.total - self._held_total, self.room()))

    def room(self) -> int:
        """What the process may still hold under ``global_max`` (local or overflow);
        without one, no bound beyond the pool's own total."""
        if self.global_max is None:
            return sys.maxsize
        return max(0, self.global_max - self._local_held - self._held_total)

    def local_taken(self, count: int) -> None:
        """A queue took ``count`` of its local permits."""
        self._local_held += count

    def local_returned(self, queue: str, count: int) -> None:
        """A queue gave back ``count`` local permits; when locals held beyond the
        minimums were what kept the pool short, the queues waiting for it are woken."""
        binding = self.global_max is not None and self.room() < self.total - self._held_total
        self._local_held -= count
        if binding and count > 0:
            self._wake_waiting(exclude=queue)

    def _set_demand(self, queue: str, wanted: int) -> None:
        was, now = self._demand[queue] > 0, wanted > 0
        if was != now:
            self._settle_credits()
        self._demand[queue] = wanted
        if was and not now:
            self._asking_weight -= self._weights[queue]
            self._settled += self._held[queue]
        elif now and not was:
            self._asking_weight += self._weights[queue]
            self._settled -= self._held[queue]
            self._credit.restart(queue, self._weights[queue], self._charged(queue))

    def _advance(self) -> None:
        self._credit.advance(self.total - self._settled, self._asking_weight)

    def _charged(self, queue: str) -> int:
        """What ``queue``'s credit is charged for holding: at most its ``ceil`` share.
        Permits it took while it asked alone, held until their handlers end, are no debt
        (a review: a queue that took the whole pool at start owed a minute of it, and ran
        nothing meanwhile)."""
        held = self._held[queue]
        return min(held, self.fair_share(queue)) if self._demand[queue] > 0 else held

    def _settle_credits(self) -> None:
        """Bill every queue's holding up to now at the charge it had: a change of the
        division (a queue begins or stops asking, a settled queue's holding, a weight or
        the pool's size) changes what each is charged from now on, never for the time
        before (a review: a queue that ran alone was billed its new, smaller cap for all
        of that time, and took credit it never earned: +50 % for a minute)."""
        self._advance()
        for queue in self._held:
            self._credit.holding(queue, self._charged(queue))

    def _add_held(self, queue: str, delta: int) -> None:
        if self._demand[queue] == 0:  # what a settled queue holds divides the pool
            self._settle_credits()
        else:
            self._advance()
            self._credit.holding(queue, self._charged(queue))
        self._held[queue] += delta
        self._held_total += delta
        if self._demand[queue] == 0:
            self._settled += delta

    def held(self, queue: str) -> int:
        """Overflow permits ``queue`` holds now."""
        return self._held[queue]

    def demand(self, queue: str) -> int:
        """What ``queue`` last asked for."""
        return self._demand[queue]

    def contending(self, queue: str) -> bool:
        """True when ``queue`` has demand or holdings (it takes part in the pool)."""
        return self._demand[queue] > 0 or self._held[queue] > 0

    def contending_weight(self) -> int:
        """Σ weight of the queues with demand: those the pool is divided among."""
        return self._asking_weight

    def _settled_held(self) -> int:
        """Permits held by queues that ask for no more: outside the division."""
        return self._settled

    def fair_share(self, queue: str) -> int:
        """``queue``'s share of the pool among the queues with demand."""
        return self._share(queue, self.contending_weight(), self._settled_held())

    def _share(self, queue: str, weight: int, settled: int) -> int:
        pool = self.total - settled
        if weight == 0:
            return pool
        return math.ceil(pool * self._weights[queue] / weight)

    def grantable(self, queue: str) -> int:
        """What a request from ``queue`` could be granted now (counting its demand)."""
        weight, settled = self.contending_weight(), self._settled_held()
        if self._demand[queue] == 0:
            weight += self._weights[queue]
            settled -= self._held[queue]
        room = self._share(queue, weight, settled) - self._held[queue]
        return max(0, min(self.available, room))

    def try_acquire(self, queue: str, wanted: int) -> int:
        """Record ``wanted`` as ``queue``'s demand and grant what fairness allows now."""
        was_asking = self._demand[queue] > 0
        self._set_demand(queue, max(wanted, 0))
        if wanted <= 0:
            if was_asking:
                self._wake_waiting(exclude=queue)  # the others' shares may have grown
            return 0
        granted = min(wanted, self.available, self.fair_share(queue) - self._held[queue])
        if granted <= 0:
            return 0
        self._add_held(queue, granted)
        self._grants += 1
        self._last_grant[queue] = self._grants
        return granted

    def urgency(self, queue: str) -> tuple[float, int]:
        """Who should be granted first, lowest first: the queue with the most credit
        (:class:`ShareCredit`: its exact share over time, less what it held), then the one
        granted longer ago.

        Σ ceil(shares) can exceed the pool, so whoever asks first keeps the rounding
        slack. Asked in this order — woken dispatchers, claims riding on a write — the
        slack goes to the queue that has gone without its share the longest: by a fixed
        order, a weight-1 queue beside one of weight 1 and one of 3 (exact shares 0.8,
        0.8, 2.4 of 4) lost every tie and ran almost nothing (a review), and by how far
        each held below its share at the moment, a queue whose share was below one
        permit never came first."""
        self._advance()
        credit = self._credit.credit(queue, self._weights[queue], self._charged(queue))
        return -credit, self._last_grant[queue]

    def release(self, queue: str, count: int = 1, *, wake_self: bool = True) -> None:
        """Return ``count`` permits; wake the queues that can now be granted some.

        ``wake_self`` is False when the dispatcher of ``queue`` itself hands back what
        its claim did not use: it has just polled and must not wake itself again.
        """
        if count < 0:
            raise ValueError(f"cannot release a negative number of permits ({count})")
        if count == 0:
            return
        if count > self._held[queue]:
            raise RuntimeError(
                f"overflow release of {count} exceeds {self._held[queue]} held by {queue!r}"
            )
        self._add_held(queue, -count)
        self._wake_waiting(exclude=queue, wake_self=wake_self)

    def clear_demand(self, queue: str) -> None:
        """``queue`` could not use all it was granted: it asks for no more for now."""
        was_asking = self._demand[queue] > 0
        self._set_demand(queue, 0)
        if was_asking:
            self._wake_waiting(exclude=queue)  # the others' shares may have grown

    def _wake_waiting(self, exclude: str, *, wake_self: bool = False) -> None:
        """Wake every other queue with demand that could be granted a permit now (and
        ``exclude`` itself when ``wake_self``), neediest first.

        Woken dispatchers poll in the order they are woken: by :meth:`urgency`, so the
        rounding slack goes to the neediest queue rather than to whichever cycles fastest.
        """
        woken: list[str] = []
        weight, settled = self.contending_weight(), self._settled_held()
        if self._wake_others and self.available > 0:
            woken = [
                queue
                for queue in self._wakers
                if queue != exclude
                and self._demand[queue] > 0
                and self._held[queue] < self._share(queue, weight, settled)
            ]
        if wake_self and exclude in self._wakers:
            woken.append(exclude)
        if len(woken) > 1:
            woken.sort(key=self.urgency)
        for queue in woken:
            self._wakers[queue]()


@dataclass(slots=True)
class Grant:
    """Permits reserved by one poll, before the claim decides how many it keeps."""

    local: int = 0
    overflow: int = 0

    @property
    def total(self) -> int:
        """All permits in the grant."""
        return self.local + self.overflow


class Permit:
    """One reserved execution slot, handed to one job. ``release`` is idempotent."""

    __slots__ = ("_also", "_overflow", "_owner", "_released")

    def __init__(self, owner: QueuePermits, overflow: bool) -> None:
        self._owner = owner
        self._overflow = overflow
        self._released = False
        self._also: Callable[[], None] | None = None

    def also_release(self, give_back: Callable[[], None]) -> None:
        """Call ``give_back`` when this permit is released: what else the job held
        (its args' share of the ArgsBudget) goes back with its slot."""
        self._also = give_back

    def release(self) -> None:
        """Give the slot back (only the first call counts)."""
        if not self._released:
            self._released = True
            if self._also is not None:
                self._also()
            self._owner._running -= 1
            if self._overflow:
                self._owner._running_overflow -= 1
                self._owner.release(Grant(overflow=1))
            else:
                self._owner.release(Grant(local=1))


class QueuePermits:
    """The permits of one queue: local slots, plus the shared pool in weighted mode."""

    def __init__(
        self, queue: str, local: int, pool: OverflowPool | None = None, weight: int = 1
    ) -> None:
        self.queue = queue
        self.local_capacity = local
        self.weight = weight
        self._pool = pool
        self._local_used = 0
        self._running = 0  # permits handed to jobs (the rest of what is held is mid-claim)
        self._running_overflow = 0  # of which from the shared pool
        self._wake: Wake | None = None

    def subscribe(self, wake: Wake) -> None:
        """Call ``wake`` whenever a permit of this queue comes back."""
        self._wake = wake
        if self._pool is not None:
            self._pool.subscribe(self.queue, wake)

    @property
    def weighted(self) -> bool:
        """True in weighted mode."""
        return self._pool is not None

    @property
    def pool(self) -> OverflowPool | None:
        """The shared overflow pool (weighted mode)."""
        return self._pool

    @property
    def in_flight(self) -> int:
        """Permits handed to jobs that still run (local and overflow)."""
        return self._running

    @property
    def held(self) -> int:
        """All permits this queue holds: its jobs' and those reserved by a claim under way."""
        return self._local_used + (self._pool.held(self.queue) if self._pool else 0)

    def resize(self, local: int, weight: int | None = None) -> None:
        """New live sizes: ``local`` permits (max_workers, or min_workers in weighted mode)
        and, in weighted mode, the queue's weight in the pool. Shrinking takes nothing
        back; growing wakes this queue's dispatcher."""
        grew = local > self.local_capacity
        self.local_capacity = local
        if weight is not None and self._pool is not None and weight != self.weight:
            self.weight = weight
            self._pool.set_weight(self.queue, weight)
        if grew and self._wake is not None:
            self._wake()

    @property
    def ceiling(self) -> int:
        """The most permits this queue could hold at once: its local ones, plus the whole
        overflow pool in weighted mode."""
        return self.local_capacity + (self._pool.total if self._pool else 0)

    @property
    def available(self) -> int:
        """Permits a poll could reserve now: free local ones plus what the pool would grant."""
        free_local = max(0, self.local_capacity - self._local_used)
        return free_local + (self._pool.grantable(self.queue) if self._pool else 0)

    def capacity(self) -> Capacity:
        """How this queue's capacity is shaped, with the overflow permits its running jobs
        hold (a claim under way reserves more for a moment; reports leave those out, as
        ``in_flight`` does, so an idle queue never looks busy)."""
        if self._pool is None:
            return HardReserved(max_workers=self.local_capacity)
        return Weighted(
            min_workers=self.local_capacity,
            weight=self.weight,
            overflow_held=self._running_overflow,
            ceiling=self.ceiling,
        )

    def try_acquire(self, wanted: int) -> Grant:
        """Reserve up to ``wanted`` permits without waiting: local first, then overflow.

        In weighted mode the part local permits cannot cover becomes this queue's
        overflow demand. When they cover it all, the demand stands as it was: a batch
        its minimum covers says nothing of the work behind it, and a saturated queue
        that dropped out of the contending weight between two of its claims let the
        others' shares take its part (design record 011: contending while demand > 0 or
        held > 0). A claim that comes back short clears it (:meth:`clear_demand`).
        """
        wanted = max(wanted, 0)
        local = min(wanted, max(0, self.local_capacity - self._local_used))
        if self._pool is not None:
            # A minimum grown live waits for overflow held above the shrunk pool.
            local = min(local, self._pool.room())
            self._pool.local_taken(local)
        self._local_used += local
        overflow = 0
        if self._pool is not None and (wanted > local or wanted == 0):  # 0: asks nothing
            overflow = self._pool.try_acquire(self.queue, wanted - local)
        return Grant(local, overflow)

    def split(self, grant: Grant, keep: int) -> list[Permit]:
        """Turn ``keep`` permits of ``grant`` into Permit objects; release the rest now.

        Local permits are kept first so the shared pool gets its permits back soonest.
        """
        keep = min(keep, grant.total)
        local = min(keep, grant.local)
        overflow = keep - local
        # Unused permits go back without waking this dispatcher: it is the one returning them.
        self.release(Grant(grant.local - local, grant.overflow - overflow), wake_self=False)
        self._running += keep
        self._running_overflow += overflow
        return [Permit(self, False) for _ in range(local)] + [
            Permit(self, True) for _ in range(overflow)
        ]

    def release(self, grant: Grant, *, wake_self: bool = True) -> None:
        """Return the permits of ``grant`` and wake whoever waits for them.

        Raises (changing nothing) when ``grant`` holds more than this queue has out.
        """
        if grant.local < 0 or grant.overflow < 0:
            raise ValueError(f"cannot release a negative grant {grant!r}")
        if grant.local > self._local_used:
            raise RuntimeError(
                f"local release of {grant.local} exceeds {self._local_used} held by {self.queue!r}"
            )
        if grant.overflow and (self._pool is None or grant.overflow > self._pool.held(self.queue)):
            raise RuntimeError(f"overflow release exceeds permits held by {self.queue!r}")
        self._local_used -= grant.local
        if grant.local and self._pool is not None:
            self._pool.local_returned(self.queue, grant.local)
        if grant.overflow and self._pool is not None:
            self._pool.release(self.queue, grant.overflow, wake_self=wake_self)
        elif grant.local and wake_self and self._wake is not None:
            self._wake()

    def clear_demand(self) -> None:
        """The last poll could not use all it was granted (few or no jobs, or rate-limited):
        stop contending for overflow until the next poll asks again."""
        if self._pool is not None:
            self._pool.clear_demand(self.queue)


def build_permits(
    queues: list[tuple[str, int, int, int]], global_max_workers: int | None
) -> dict[str, QueuePermits]:
    """Permits for every queue from (name, max_workers, min_workers, weight) tuples."""
    if global_max_workers is None:
        return {name: QueuePermits(name, max_workers) for name, max_workers, _, _ in queues}
    overflow = global_max_workers - sum(min_workers for _, _, min_workers, _ in queues)
    pool = OverflowPool(
        overflow, {name: weight for name, _, _, weight in queues}, global_max_workers
    )
    return {
        name: QueuePermits(name, min_workers, pool, weight)
        for name, _, min_workers, weight in queues
    }
