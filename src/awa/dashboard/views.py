"""What the pages show, gathered through awa's public API only (read-only helpers)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime

import awa
from awa.dashboard.samples import Sampler

SETTINGS = ("poll_interval_ms", "claim_batch_size", "rate_limit", "deadline_ms")
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
    throughput: float | None
    workers: list[WorkerQueue] = field(default_factory=list)

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
    """Seconds since the worker last published its snapshot."""
    return max(0.0, (datetime.now(UTC) - instance.last_seen_at).total_seconds())


def instance_health(instance: awa.RuntimeInstance) -> str:
    """``ok`` when the worker published recently, ``late`` otherwise."""
    return "ok" if instance_age_s(instance) <= LATE_AFTER_S else "late"


async def queue_views(
    client: awa.AsyncClient, sampler: Sampler, only: str | None = None
) -> tuple[list[QueueView], list[awa.RuntimeInstance]]:
    """Every queue with jobs, a control row or a live worker (or just ``only``), and the
    live workers."""
    stats, instances = await asyncio.gather(client.queue_stats(), client.list_runtime_instances())
    by_name = {s.queue: s for s in stats}
    for instance in instances:
        for name in instance.snapshot.queues if instance.snapshot else ():
            by_name.setdefault(name, empty_stat(name))
    if only is not None:
        by_name = {only: by_name.get(only, empty_stat(only))}
    names = sorted(by_name)
    overrides = await asyncio.gather(*(client.queue_runtime_overrides(n) for n in names))
    views = {
        n: QueueView(by_name[n], o, sampler.throughput_per_minute(n))
        for n, o in zip(names, overrides, strict=True)
    }
    for instance in instances:
        for name, runtime in (instance.snapshot.queues if instance.snapshot else {}).items():
            if name in views:
                views[name].workers.append(WorkerQueue(instance, runtime))
    return [views[n] for n in names], instances
