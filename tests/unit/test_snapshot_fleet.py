"""A queue's fleet view in the published snapshot: it survives the JSON round trip, and
rows written by workers that predate it (or by newer ones) still read."""

from __future__ import annotations

from datetime import UTC, datetime

import awa
from awa.worker.snapshot import snapshot_from_json, snapshot_json

LIMITS = awa.QueueLimits(
    queue="email", concurrency=10, rate_limit=2.5, burst=None, partition_by="tenant",
    updated_at=datetime(2026, 11, 30, 12, 0, 1, 250_000, tzinfo=UTC),
)  # fmt: skip


def _queue(fleet: awa.QueueFleet | None) -> awa.QueueRuntime:
    return awa.QueueRuntime(
        configured={}, overrides={}, effective={}, ignored={},
        capacity=awa.HardReserved(4), in_flight=1, paused=False, fleet=fleet,
    )  # fmt: skip


def _snapshot(**queues: awa.QueueRuntime) -> awa.RuntimeSnapshot:
    return awa.RuntimeSnapshot(
        instance_id="i", hostname="h", pid=1, started_at=datetime(2026, 11, 30, tzinfo=UTC),
        leader=False, mode="hard_reserved", global_max_workers=None, queues=queues,
    )  # fmt: skip


def test_fleet_views_round_trip_through_json() -> None:
    snap = _snapshot(
        limited=_queue(awa.QueueFleet(LIMITS, None, None, running=7, blocked="partition",
                                      holds=3, top_partitions=[("acme", 5), ("", 2)])),
        pooled=_queue(awa.QueueFleet(None, awa.PoolMember(2, 3), 12, running=0)),
        plain=_queue(None),
    )  # fmt: skip
    data = snapshot_json(snap)
    assert (
        data["queues"]["limited"]["fleet"]["limits"]["updated_at"] == LIMITS.updated_at.isoformat()
    )
    assert data["queues"]["plain"]["fleet"] is None
    assert snapshot_from_json(data) == snap


def test_rows_without_the_fleet_view_or_with_newer_keys_still_read() -> None:
    data = snapshot_json(_snapshot(a=_queue(awa.QueueFleet(LIMITS, running=2)), b=_queue(None)))
    del data["queues"]["b"]["fleet"]  # a worker from before fleet views
    fleet = data["queues"]["a"]["fleet"]
    del fleet["holds"], fleet["blocked"]  # an older shape of the view
    fleet["limits"]["window_s"] = 60  # keys a newer awa may add
    fleet["partitions"] = []
    snap = snapshot_from_json(data)
    assert snap.queues["b"].fleet is None
    assert snap.queues["a"].fleet == awa.QueueFleet(LIMITS, running=2, blocked=None, holds=0)
