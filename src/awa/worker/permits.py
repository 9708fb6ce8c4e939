"""Execution permits: a dispatcher reserves them before it claims (design record 011).

One :class:`QueuePermits` per queue serves both modes:

* hard-reserved — ``local`` = ``max_workers``, no overflow pool;
* weighted — ``local`` = ``min_workers``, plus the process-wide :class:`OverflowPool`
  of ``global_max_workers − Σ min_workers`` shared by weighted fair share.

Everything runs on the worker's event loop thread, so plain counters suffice: no call
here ever blocks or awaits. A :class:`Permit` releases its slot exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from awa.types import Capacity, HardReserved, Weighted

Wake = Callable[[], None]


class OverflowPool:
    """Work-conserving, weighted fair-share allocator of the shared overflow permits.

    ``held`` counts permits each queue holds now, ``demand`` what it last asked for
    (cleared when its poll finds nothing), ``weights`` are fixed at start.
    ``fair_share = ceil(total × weight / contending_weight)`` over queues with demand or
    holdings; a request gets ``min(wanted, available, fair_share − held)``.
    """

    def __init__(self, total: int, weights: dict[str, int]) -> None:
        if total < 0:
            raise ValueError("overflow total must be >= 0")
        self.total = total
        self._weights = dict(weights)
        self._held = dict.fromkeys(weights, 0)
        self._demand = dict.fromkeys(weights, 0)
        self._wakers: dict[str, Wake] = {}

    def subscribe(self, queue: str, wake: Wake) -> None:
        """Call ``wake`` when permits free up and ``queue`` has unmet demand."""
        self._wakers[queue] = wake

    @property
    def available(self) -> int:
        """Permits nobody holds."""
        return self.total - sum(self._held.values())

    def held(self, queue: str) -> int:
        """Overflow permits ``queue`` holds now."""
        return self._held[queue]

    def demand(self, queue: str) -> int:
        """What ``queue`` last asked for."""
        return self._demand[queue]

    def contending_weight(self) -> int:
        """Σ weight of queues with demand or holdings."""
        return sum(
            weight
            for queue, weight in self._weights.items()
            if self._demand[queue] > 0 or self._held[queue] > 0
        )

    def fair_share(self, queue: str) -> int:
        """``queue``'s share of the pool among the current contenders."""
        contending = self.contending_weight()
        if contending == 0:
            return self.total
        return math.ceil(self.total * self._weights[queue] / contending)

    def try_acquire(self, queue: str, wanted: int) -> int:
        """Record ``wanted`` as ``queue``'s demand and grant what fairness allows now."""
        self._demand[queue] = max(wanted, 0)
        if wanted <= 0:
            return 0
        granted = min(wanted, self.available, self.fair_share(queue) - self._held[queue])
        if granted <= 0:
            return 0
        self._held[queue] += granted
        return granted

    def release(self, queue: str, count: int = 1, *, wake_self: bool = True) -> None:
        """Return ``count`` permits and wake every queue whose demand is unmet."""
        if count <= 0:
            return
        if count > self._held[queue]:
            raise RuntimeError(
                f"overflow release of {count} exceeds {self._held[queue]} held by {queue!r}"
            )
        self._held[queue] -= count
        # Beyond the record: wake other queues too, so a newcomer converges at once
        # instead of at its next poll.
        for other, wake in self._wakers.items():
            if (other == queue and wake_self) or (other != queue and self._demand[other] > 0):
                wake()

    def clear_demand(self, queue: str) -> None:
        """``queue`` found nothing to do: stop counting it as a contender."""
        self._demand[queue] = 0


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

    __slots__ = ("_overflow", "_owner", "_released")

    def __init__(self, owner: QueuePermits, overflow: bool) -> None:
        self._owner = owner
        self._overflow = overflow
        self._released = False

    def release(self) -> None:
        """Give the slot back (only the first call counts)."""
        if not self._released:
            self._released = True
            if self._overflow:
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
    def in_flight(self) -> int:
        """Permits held by running jobs (local and overflow)."""
        return self._local_used + (self._pool.held(self.queue) if self._pool else 0)

    @property
    def available(self) -> int:
        """Local permits free now plus what the pool has unheld (its fair share not applied)."""
        free_local = self.local_capacity - self._local_used
        return free_local + (self._pool.available if self._pool else 0)

    def capacity(self) -> Capacity:
        """How this queue's capacity is shaped, with live overflow holdings."""
        if self._pool is None:
            return HardReserved(max_workers=self.local_capacity)
        return Weighted(
            min_workers=self.local_capacity,
            weight=self.weight,
            overflow_held=self._pool.held(self.queue),
        )

    def try_acquire(self, wanted: int) -> Grant:
        """Reserve up to ``wanted`` permits without waiting: local first, then overflow."""
        local = min(wanted, self.local_capacity - self._local_used)
        self._local_used += local
        overflow = 0
        if self._pool is not None:
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
        return [Permit(self, False) for _ in range(local)] + [
            Permit(self, True) for _ in range(overflow)
        ]

    def release(self, grant: Grant, *, wake_self: bool = True) -> None:
        """Return the permits of ``grant`` and wake whoever waits for them."""
        if grant.local:
            if grant.local > self._local_used:
                raise RuntimeError(f"local release exceeds permits held by {self.queue!r}")
            self._local_used -= grant.local
        if grant.overflow and self._pool is not None:
            self._pool.release(self.queue, grant.overflow, wake_self=wake_self)
        elif grant.local and wake_self and self._wake is not None:
            self._wake()

    def clear_demand(self) -> None:
        """The last poll found no jobs: stop contending for overflow."""
        if self._pool is not None:
            self._pool.clear_demand(self.queue)


def build_permits(
    queues: list[tuple[str, int, int, int]], global_max_workers: int | None
) -> dict[str, QueuePermits]:
    """Permits for every queue from (name, max_workers, min_workers, weight) tuples."""
    if global_max_workers is None:
        return {name: QueuePermits(name, max_workers) for name, max_workers, _, _ in queues}
    overflow = global_max_workers - sum(min_workers for _, _, min_workers, _ in queues)
    pool = OverflowPool(overflow, {name: weight for name, _, _, weight in queues})
    return {
        name: QueuePermits(name, min_workers, pool, weight)
        for name, _, min_workers, weight in queues
    }
