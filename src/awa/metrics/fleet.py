"""The fleet gauges: caps, rate limits, fleet-wide running jobs and the fleet pool.

Fleet values are the same for every process, so they come from one of two places: a
worker's snapshot (what its last control refresh read, free at scrape time), or, in a
process that runs no worker (the dashboard's ``/metrics``), ``queue_limits_status()`` and
``fleet_pool()`` read with the queue statistics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from awa.metrics import spec
from awa.types import FleetPool, PoolMember, QueueLimits, QueueLimitsStatus, QueueRuntime

Sample = tuple[tuple[str, ...], float]
Samples = dict[str, list[Sample]]


@dataclass(frozen=True, slots=True)
class StoredFleet:
    """The fleet limits and pool as read from the database at one scrape."""

    limits: list[QueueLimitsStatus]
    pool: FleetPool | None


def _samples(
    limits: Iterable[QueueLimits],
    running: Mapping[str, int],
    pool_total: int | None,
    members: Mapping[str, PoolMember],
) -> Samples:
    concurrency: list[Sample] = []
    rate: list[Sample] = []
    for limit in limits:
        if limit.concurrency is not None:
            concurrency.append(((limit.queue,), float(limit.concurrency)))
        if limit.rate_limit is not None:
            rate.append(((limit.queue,), float(limit.rate_limit)))
    return {
        spec.FLEET_LIMIT_CONCURRENCY.name: concurrency,
        spec.FLEET_LIMIT_RATE.name: rate,
        spec.FLEET_RUNNING.name: [((q,), float(n)) for q, n in sorted(running.items())],
        spec.FLEET_POOL_TOTAL.name: [] if pool_total is None else [((), float(pool_total))],
        spec.FLEET_POOL_MIN_WORKERS.name: [
            ((q,), float(m.min_workers)) for q, m in sorted(members.items())
        ],
        spec.FLEET_POOL_WEIGHT.name: [((q,), float(m.weight)) for q, m in sorted(members.items())],
    }


def snapshot_samples(queues: Mapping[str, QueueRuntime]) -> Samples:
    """The fleet gauges of a worker's queues, from its snapshot."""
    fleets = {name: q.fleet for name, q in queues.items() if q.fleet is not None}
    totals = [f.pool_total for f in fleets.values() if f.pool_total is not None]
    return _samples(
        (f.limits for f in fleets.values() if f.limits is not None),
        {name: f.running for name, f in fleets.items() if f.running is not None},
        totals[0] if totals else None,
        {name: f.pool_member for name, f in fleets.items() if f.pool_member is not None},
    )


def stored_samples(stored: StoredFleet) -> Samples:
    """The fleet gauges of every limited queue and pool member, from the database."""
    pool = stored.pool
    running = {s.limits.queue: s.running for s in stored.limits}
    if pool is not None:
        running.update(pool.running)
    return _samples(
        (s.limits for s in stored.limits),
        running,
        None if pool is None else pool.total,
        {} if pool is None else pool.queues,
    )
