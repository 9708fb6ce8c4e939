"""What a live worker makes of the fleet limits, as the CLI shows it: ``awa runtime list``
and ``awa queue limits show`` (CONTRACT §8: "runtime_snapshot() and awa queue limits show
report the stored limits and the fleet's current running count")."""

from __future__ import annotations

import json
import uuid

import psycopg
from psycopg.types.json import Jsonb

import awa
from tests.acceptance.conftest import Awa
from tests.helpers import wait_until


def _published_fleet(client: awa.Client, queue: str) -> awa.QueueFleet | None:
    (instance,) = client.list_runtime_instances()
    return instance.snapshot.queues[queue].fleet if instance.snapshot else None


def test_runtime_list_and_limits_show_name_each_workers_fleet_view(
    awa_cli: Awa, live_worker: awa.Client
) -> None:
    stored = live_worker.set_queue_limits("email", concurrency=5, rate_limit=20.0)
    assert stored is not None
    wait_until(lambda: (f := _published_fleet(live_worker, "email")) and f.limits == stored)

    listed = awa_cli("runtime", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (worker,) = listed.json()
    email, reports = worker["queues"]["email"], worker["queues"]["reports"]
    assert reports["fleet"] is None
    fleet = email["fleet"]
    assert fleet["limits"] == {
        "queue": "email", "concurrency": 5, "rate_limit": 20.0, "burst": None,
        "partition_by": None, "updated_at": stored.updated_at.isoformat(),
    }  # fmt: skip
    assert (fleet["pool_member"], fleet["pool_total"], fleet["running"]) == (None, None, 0)
    assert fleet["blocked"] is None and fleet["holds"] == 0
    table = awa_cli("runtime", "list")
    assert table.returncode == 0 and "cap 5 · 20/s · fleet running 0" in table.stdout

    shown = awa_cli("queue", "limits", "show", "email", "--json")
    assert shown.returncode == 0, shown.stderr
    body = shown.json()
    assert (body["queue"], body["concurrency"], body["running"]) == ("email", 5, 0)
    (seen,) = body["workers"]
    assert seen["pid"] == worker["pid"] and seen["instance_id"] == worker["instance_id"]
    assert (seen["applied"], seen["fleet_running"], seen["blocked"], seen["holds"]) == (
        True, 0, None, 0,
    )  # fmt: skip
    text = awa_cli("queue", "limits", "show").stdout
    assert "applies these" in text and "yes" in text

    # Rows of workers that have not read the new limits yet (the last one published, its
    # worker gone), and of a worker from before fleet views: shown, never "applied".
    with psycopg.connect(live_worker.database_url, autocommit=True) as conn:
        (published,) = conn.execute("SELECT snapshot FROM awa.runtime_instances").fetchone() or ()
    live_worker.shutdown()
    live_worker.set_queue_limits("email", concurrency=6)
    older = json.loads(json.dumps(published))
    for queue in older["queues"].values():
        del queue["fleet"]
    with psycopg.connect(live_worker.database_url, autocommit=True) as conn:
        for pid, snapshot in ((7001, published), (7002, older)):
            conn.execute(
                "INSERT INTO awa.runtime_instances VALUES (%s, 'old-host', %s, now(), now(), "
                "false, %s)",
                (uuid.uuid4(), pid, Jsonb(snapshot)),
            )
        # Silent for 40 s: stopped, as explain counts (30 s), though kept for a while.
        # Listed as live and "not yet" applying the limits, it contradicted explain's
        # "no worker has reported in the last 30 s" (a review).
        conn.execute(
            "INSERT INTO awa.runtime_instances VALUES (%s, 'old-host', 7003, now(), "
            "now() - interval '40 seconds', false, %s)",
            (uuid.uuid4(), Jsonb(published)),
        )
    workers = awa_cli("queue", "limits", "show", "--json").json()[0]["workers"]
    assert sorted((w["pid"], w["applied"], w["fleet_running"]) for w in workers) == [
        (7001, False, 0), (7002, False, None),
    ]  # fmt: skip
    listed = {w["pid"]: w for w in awa_cli("runtime", "list", "--json").json()}
    assert listed[7002]["queues"]["email"]["fleet"] is None
    assert listed[7001]["queues"]["email"]["fleet"]["limits"]["concurrency"] == 5
