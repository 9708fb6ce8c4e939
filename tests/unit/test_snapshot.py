"""The worker's read model survives its JSON round trip, across awa versions."""

from __future__ import annotations

from datetime import UTC, datetime

import awa
from awa.worker.snapshot import snapshot_from_json, snapshot_json


def _snapshot() -> awa.RuntimeSnapshot:
    queue = awa.QueueRuntime(
        configured={"deadline_ms": 1_000},
        overrides={"deadline_ms": None},
        effective={"deadline_ms": 1_000},
        ignored={},
        capacity=awa.Weighted(min_workers=1, weight=2, overflow_held=3),
        in_flight=4,
        paused=False,
        available=5,
        running=4,
        polling=True,
    )
    return awa.RuntimeSnapshot(
        instance_id="i", hostname="h", pid=1, started_at=datetime(2024, 1, 1, tzinfo=UTC),
        leader=True, mode="weighted", global_max_workers=8, queues={"q": queue},
        shutting_down=False, services={"heartbeat": True, "listener": False},
    )  # fmt: skip


def test_a_snapshot_round_trips_through_json() -> None:
    snap = _snapshot()
    assert snapshot_from_json(snapshot_json(snap)) == snap


def test_rows_of_older_and_newer_workers_still_read() -> None:
    data = snapshot_json(_snapshot())
    del data["services"], data["queues"]["q"]["running"]  # written before these existed
    data["fleet_limits"] = {"q": 3}  # written by a newer awa
    data["queues"]["q"]["partitions"] = []
    snap = snapshot_from_json(data)
    assert snap.services == {} and snap.queues["q"].running == 0
    assert snap.queues["q"].capacity == awa.Weighted(1, 2, 3)
