"""Runtime snapshots as JSON (for ``awa.runtime_instances``) and back."""

from __future__ import annotations

from dataclasses import asdict
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
    )


def _capacity_json(capacity: HardReserved | Weighted) -> dict[str, Any]:
    if isinstance(capacity, HardReserved):
        return {"mode": "hard_reserved", **asdict(capacity)}
    return {"mode": "weighted", **asdict(capacity)}


def fleet_json(fleet: QueueFleet | None) -> dict[str, Any] | None:
    """A queue's fleet view as JSON (the shape ``awa runtime list --json`` prints)."""
    if fleet is None:
        return None
    data = asdict(fleet)
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
    )  # fmt: skip


def snapshot_json(snap: RuntimeSnapshot) -> dict[str, Any]:
    """A JSON-ready dict of ``snap`` (datetimes as ISO strings)."""
    return {
        "instance_id": snap.instance_id,
        "hostname": snap.hostname,
        "pid": snap.pid,
        "started_at": snap.started_at.isoformat(),
        "leader": snap.leader,
        "mode": snap.mode,
        "global_max_workers": snap.global_max_workers,
        "queues": {
            name: {
                "configured": q.configured,
                "overrides": q.overrides,
                "effective": q.effective,
                "ignored": q.ignored,
                "capacity": _capacity_json(q.capacity),
                "in_flight": q.in_flight,
                "paused": q.paused,
                "fleet": fleet_json(q.fleet),
            }
            for name, q in snap.queues.items()
        },
        "running_job_ids": list(snap.running_job_ids),
    }


def capacity_from_json(data: dict[str, Any]) -> HardReserved | Weighted:
    """Inverse of the capacity part of :func:`snapshot_json`."""
    if data.get("mode") == "weighted":
        return Weighted(data["min_workers"], data["weight"], data["overflow_held"])
    return HardReserved(data["max_workers"])


def queue_runtime_from_json(data: dict[str, Any]) -> QueueRuntime:
    """Inverse of one queue entry of :func:`snapshot_json`."""
    return QueueRuntime(
        configured=data["configured"],
        overrides=data["overrides"],
        effective=data["effective"],
        ignored=data["ignored"],
        capacity=capacity_from_json(data["capacity"]),
        in_flight=data["in_flight"],
        paused=data["paused"],
        fleet=fleet_from_json(data.get("fleet")),  # older workers omit it
    )


def snapshot_from_json(data: dict[str, Any]) -> RuntimeSnapshot:
    """Inverse of :func:`snapshot_json`."""
    return RuntimeSnapshot(
        instance_id=data["instance_id"],
        hostname=data["hostname"],
        pid=data["pid"],
        started_at=datetime.fromisoformat(data["started_at"]),
        leader=data["leader"],
        mode=data["mode"],
        global_max_workers=data["global_max_workers"],
        queues={name: queue_runtime_from_json(q) for name, q in data["queues"].items()},
        running_job_ids=tuple(data.get("running_job_ids", ())),  # older workers omit it
    )
