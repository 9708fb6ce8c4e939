"""The worker's read model: one :class:`~awa.types.RuntimeSnapshot`, built on the worker's
loop, and its JSON form for ``awa.runtime_instances``.

Every reader — ``health_check()``, the metrics gauges (also from a scraping thread),
``runtime_snapshot()``, the published row — consumes a snapshot instead of reaching into
dispatchers, permits or the executor. :func:`queue_runtime` is the one place that reads a
queue's live state; a new field is added to :class:`~awa.types.QueueRuntime` (or
:class:`~awa.types.RuntimeSnapshot`) with a default, filled in here, and the JSON
round-trip follows from the dataclass fields (only nested dataclasses need a line).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any

from awa.types import (
    HardReserved,
    PoolMember,
    QueueFleet,
    QueueLimits,
    QueueRuntime,
    RuntimeSnapshot,
    Weighted,
)

if TYPE_CHECKING:
    from awa.worker.dispatcher import Dispatcher
    from awa.worker.executor import Census


def queue_runtime(dispatcher: Dispatcher, census: Census, parked: int = 0) -> QueueRuntime:
    """``dispatcher``'s queue as the snapshot shows it (``census``: its handlers;
    ``parked``: its permits parked in handoff seats, which a job takes at once and so
    count as available — an idle queue's in_flight + available is its capacity)."""
    permits = dispatcher.permits
    settings = dispatcher.control.runtime(permits.capacity(), permits.in_flight)
    return dataclasses.replace(
        settings,
        fleet=queue_fleet(dispatcher),
        available=permits.available + parked,
        running=census.running,
        polling=dispatcher.alive,
        stuck=census.stuck,
        abandoned=census.abandoned,
    )


def queue_fleet(dispatcher: Dispatcher) -> QueueFleet | None:
    """The fleet's view of ``dispatcher``'s queue (None: the fleet does not limit it)."""
    control = dispatcher.control
    if not control.coordinated:
        return None
    return QueueFleet(
        limits=control.limits,
        pool_member=control.pool_member,
        pool_total=control.pool_total,
        running=control.fleet_running,
        blocked=dispatcher.blocked,
        holds=dispatcher.fleet_holds,
        top_partitions=list(control.fleet_top_partitions),
    )


# -- JSON ------------------------------------------------------------------------------


def _capacity_json(capacity: HardReserved | Weighted) -> dict[str, Any]:
    if isinstance(capacity, HardReserved):
        return {"mode": "hard_reserved", **dataclasses.asdict(capacity)}
    return {"mode": "weighted", **dataclasses.asdict(capacity)}


def fleet_json(fleet: QueueFleet | None) -> dict[str, Any] | None:
    """A queue's fleet view as JSON (the shape ``awa runtime list --json`` prints)."""
    if fleet is None:
        return None
    data = dataclasses.asdict(fleet)
    if fleet.limits is not None:
        data["limits"]["updated_at"] = fleet.limits.updated_at.isoformat()
    return data


def fleet_from_json(data: dict[str, Any] | None) -> QueueFleet | None:
    """Inverse of :func:`fleet_json`; keys a newer worker adds are ignored, missing ones
    take their defaults."""
    if not data:
        return None
    limits, member = data.get("limits"), data.get("pool_member")
    return QueueFleet(
        limits=None if limits is None else QueueLimits(
            queue=limits["queue"],
            concurrency=limits.get("concurrency"),
            rate_limit=limits.get("rate_limit"),
            burst=limits.get("burst"),
            partition_by=limits.get("partition_by"),
            updated_at=datetime.fromisoformat(limits["updated_at"]),
        ),
        pool_member=None if member is None else PoolMember(
            member.get("min_workers", 0), member.get("weight", 1)
        ),
        pool_total=data.get("pool_total"),
        running=data.get("running"),
        blocked=data.get("blocked"),
        holds=data.get("holds", 0),
        top_partitions=[(key, n) for key, n in data.get("top_partitions", ())],
    )  # fmt: skip


def _queue_json(queue: QueueRuntime) -> dict[str, Any]:
    data = {f.name: getattr(queue, f.name) for f in dataclasses.fields(queue)}
    data["capacity"] = _capacity_json(queue.capacity)
    data["fleet"] = fleet_json(queue.fleet)
    return data


def snapshot_json(snap: RuntimeSnapshot) -> dict[str, Any]:
    """A JSON-ready dict of ``snap`` (datetimes as ISO strings)."""
    data = {f.name: getattr(snap, f.name) for f in dataclasses.fields(snap)}
    data["started_at"] = snap.started_at.isoformat()
    data["queues"] = {name: _queue_json(q) for name, q in snap.queues.items()}
    data["running_job_ids"] = list(snap.running_job_ids)
    return data


def _known(cls: type[Any], data: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that ``cls`` has fields for (rows written by an older or
    newer awa lack some and carry others; missing ones take their defaults)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def capacity_from_json(data: dict[str, Any]) -> HardReserved | Weighted:
    """Inverse of the capacity part of :func:`snapshot_json`."""
    if data.get("mode") == "weighted":
        return Weighted(
            data["min_workers"], data["weight"], data["overflow_held"], data.get("ceiling")
        )
    return HardReserved(data["max_workers"])


def queue_runtime_from_json(data: dict[str, Any]) -> QueueRuntime:
    """Inverse of one queue entry of :func:`snapshot_json`."""
    values = _known(QueueRuntime, data)
    values["capacity"] = capacity_from_json(data["capacity"])
    values["fleet"] = fleet_from_json(data.get("fleet"))  # older workers omit it
    return QueueRuntime(**values)


def snapshot_from_json(data: dict[str, Any]) -> RuntimeSnapshot:
    """Inverse of :func:`snapshot_json`."""
    values = _known(RuntimeSnapshot, data)
    values["started_at"] = datetime.fromisoformat(data["started_at"])
    values["queues"] = {name: queue_runtime_from_json(q) for name, q in data["queues"].items()}
    values["running_job_ids"] = tuple(data.get("running_job_ids", ()))  # older workers omit it
    return RuntimeSnapshot(**values)
