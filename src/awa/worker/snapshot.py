"""Runtime snapshots as JSON (for ``awa.runtime_instances``) and back."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from awa.types import HardReserved, QueueRuntime, RuntimeSnapshot, Weighted


def _capacity_json(capacity: HardReserved | Weighted) -> dict[str, Any]:
    if isinstance(capacity, HardReserved):
        return {"mode": "hard_reserved", **asdict(capacity)}
    return {"mode": "weighted", **asdict(capacity)}


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
