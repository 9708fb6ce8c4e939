"""What the pages show, gathered through awa's public API only (read-only helpers)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

import awa
from awa.override_keys import KEYS

SETTINGS = KEYS
# A worker publishes its snapshot every 10 s; one silent for longer than this is late.
LATE_AFTER_S = 25.0


def empty_stat(queue: str) -> awa.QueueStat:
    """Zero counts for a queue that only a live worker knows about."""
    return awa.QueueStat(queue, 0, 0, 0, 0, 0, 0, 0, 0, 0, None, False)


def override_active(overrides: awa.RuntimeOverrides | None) -> bool:
    """True when at least one override is stored."""
    return overrides is not None and any(getattr(overrides, k) is not None for k in SETTINGS)


def capacity_text(capacity: awa.HardReserved | awa.Weighted, overflow: bool = True) -> str:
    """``hard 10`` or ``weighted min 2 · weight 1 · overflow 3`` (the overflow held now)."""
    if isinstance(capacity, awa.HardReserved):
        return f"hard {capacity.max_workers}"
    text = f"weighted min {capacity.min_workers} · weight {capacity.weight}"
    return f"{text} · overflow {capacity.overflow_held}" if overflow else text


@dataclass(frozen=True, slots=True)
class WorkerQueue:
    """One live worker's view of one queue."""

    instance: awa.RuntimeInstance
    runtime: awa.QueueRuntime


@dataclass(slots=True)
class QueueView:
    """A queue as the overview and detail pages show it."""

    stat: awa.QueueStat
    overrides: awa.RuntimeOverrides | None
    workers: list[WorkerQueue] = field(default_factory=list)
    limits: awa.QueueLimitsStatus | None = None  # fleet limits, with what the fleet runs now
    pool_member: awa.PoolMember | None = None

    @property
    def throughput(self) -> int:
        """Completions of the last minute (read with the counts, not sampled)."""
        return self.stat.completed_last_minute

    @property
    def name(self) -> str:
        """The queue's name."""
        return self.stat.queue

    @property
    def override_active(self) -> bool:
        """True when an override is stored for this queue."""
        return override_active(self.overrides)

    @property
    def modes(self) -> str:
        """The concurrency mode(s) of the live workers running it, or ``-``."""
        modes = sorted({_mode(w.runtime.capacity) for w in self.workers})
        return ", ".join(modes) if modes else "-"

    @property
    def capacity(self) -> str:
        """Capacity summed over live workers, e.g. ``weighted min 4 · weight 2 · overflow 3``."""
        caps = [w.runtime.capacity for w in self.workers]
        if not caps:
            return "no live worker"
        parts = []
        maxes = [c.max_workers for c in caps if isinstance(c, awa.HardReserved)]
        if maxes:
            parts.append(f"hard {sum(maxes)}")
        weighted = [c for c in caps if isinstance(c, awa.Weighted)]
        if weighted:
            weights = "/".join(sorted({str(c.weight) for c in weighted}))
            parts.append(
                f"min {sum(c.min_workers for c in weighted)} · weight {weights} · "
                f"overflow held {sum(c.overflow_held for c in weighted)}"
            )
        suffix = f" ({len(self.workers)} workers)" if len(self.workers) > 1 else ""
        return " + ".join(parts) + suffix

    @property
    def in_flight(self) -> int:
        """Permits held by running jobs of this queue across live workers."""
        return sum(w.runtime.in_flight for w in self.workers)


def _mode(capacity: awa.HardReserved | awa.Weighted) -> str:
    return "hard-reserved" if isinstance(capacity, awa.HardReserved) else "weighted"


def instance_age_s(instance: awa.RuntimeInstance) -> float:
    """Seconds since the worker last published its snapshot, by the database's clock."""
    return instance.seen_ago_s


def instance_health(instance: awa.RuntimeInstance) -> str:
    """``ok`` when the worker published recently, ``late`` otherwise."""
    return "ok" if instance_age_s(instance) <= LATE_AFTER_S else "late"


async def queue_views(
    client: awa.AsyncClient, only: str | None = None
) -> tuple[list[QueueView], list[awa.RuntimeInstance], awa.FleetPool | None]:
    """Every queue with jobs, a control row, fleet limits, a place in the fleet pool or a
    live worker (or just ``only``), the live workers, and the fleet pool."""
    stats, instances, limits, pool = await asyncio.gather(
        client.queue_stats(),
        client.list_runtime_instances(),
        client.queue_limits_status(only),
        client.fleet_pool(),
    )
    by_name = {s.queue: s for s in stats}
    for instance in instances:
        for name in instance.snapshot.queues if instance.snapshot else ():
            by_name.setdefault(name, empty_stat(name))
    for name in [s.limits.queue for s in limits] + list(pool.queues if pool else ()):
        by_name.setdefault(name, empty_stat(name))
    if only is not None:
        by_name = {only: by_name.get(only, empty_stat(only))}
    names = sorted(by_name)
    overrides = await asyncio.gather(*(client.queue_runtime_overrides(n) for n in names))
    views = {n: QueueView(by_name[n], o) for n, o in zip(names, overrides, strict=True)}
    for instance in instances:
        for name, runtime in (instance.snapshot.queues if instance.snapshot else {}).items():
            if name in views:
                views[name].workers.append(WorkerQueue(instance, runtime))
    for status in limits:
        if status.limits.queue in views:
            views[status.limits.queue].limits = status
    for name, member in (pool.queues if pool else {}).items():
        if name in views:
            views[name].pool_member = member
    return [views[n] for n in names], instances, pool


def limits_text(limits: awa.QueueLimits) -> str:
    """``cap 10 · 5/s (burst 10) · per tenant`` (what a badge's title says)."""
    parts = []
    if limits.concurrency is not None:
        parts.append(f"cap {limits.concurrency}")
    if limits.rate_limit is not None:
        burst = f" (burst {limits.burst})" if limits.burst is not None else ""
        parts.append(f"{limits.rate_limit:g}/s{burst}")
    if limits.partition_by is not None:
        parts.append(f"per {limits.partition_by}")
    return " · ".join(parts)


def fleet_brief(fleet: awa.QueueFleet | None) -> str:
    """A worker's fleet view of one queue in a few words (the runtime page's column)."""
    if fleet is None:
        return "-"
    parts = [limits_text(fleet.limits)] if fleet.limits is not None else []
    member = fleet.pool_member
    if member is not None:
        parts.append(
            f"pool min {member.min_workers} · weight {member.weight} of {fleet.pool_total}"
        )
    if fleet.running is not None:
        parts.append(f"fleet running {fleet.running}")
    if fleet.blocked is not None:
        parts.append(f"held back by {fleet.blocked}")
    return " · ".join(parts)


def fleet_seen_text(fleet: awa.QueueFleet | None, stored: awa.QueueLimits | None) -> str:
    """One worker's view of the fleet's hold on a queue, for its panel on the queue page:
    whether it applies the stored limits, the fleet's running count it last read, and why
    the fleet last held back its claims."""
    if fleet is None:
        return "has not read the fleet's limits on this queue yet"
    parts = []
    if fleet.limits != stored:
        parts.append("has not read the stored limits yet")
    elif stored is not None:
        parts.append("applies the stored limits")
    if fleet.pool_member is not None:
        parts.append("in the fleet pool")
    if fleet.running is not None:
        parts.append(f"fleet running {fleet.running} at its last refresh")
    held = (
        f"last claim held back by {fleet.blocked}" if fleet.blocked else "last claim not held back"
    )
    return " · ".join([*parts, held, f"{fleet.holds} hold{'' if fleet.holds == 1 else 's'}"])


@dataclass(frozen=True, slots=True)
class PoolMemberView:
    """One member of the fleet pool as the pool page shows it."""

    queue: str
    min_workers: int
    weight: int
    running: int
    waiting: int
    share: int  # min_workers + its weighted part of the rest when every member is busy


@dataclass(frozen=True, slots=True)
class PoolView:
    """The fleet pool with each member's running jobs against its share."""

    total: int
    updated_at: datetime
    members: list[PoolMemberView]

    @property
    def running(self) -> int:
        """Jobs of every member running across the fleet now."""
        return sum(m.running for m in self.members)


def pool_view(pool: awa.FleetPool, stats: list[awa.QueueStat]) -> PoolView:
    """``pool`` with each member's waiting jobs (from ``stats``) and share."""
    waiting = {s.queue: s.available for s in stats}
    shares = pool.busy_shares()  # a member with nothing to do leaves its part to others
    members = [
        PoolMemberView(name, m.min_workers, m.weight, pool.running.get(name, 0),
                       waiting.get(name, 0), shares[name])
        for name, m in sorted(pool.queues.items())
    ]  # fmt: skip
    return PoolView(pool.total, pool.updated_at, members)
