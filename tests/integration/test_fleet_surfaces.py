"""Fleet limits and the fleet pool where an operator looks (issue 13 item 6): a live
worker's snapshot (in process and as published), its Prometheus gauges and hold counter,
and the dashboard's ``/metrics``, which reads the fleet from the database."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa
import awa.metrics
from tests.acceptance.support import LIVE_SETTINGS
from tests.helpers import FAST_WORKER, running_jobs, wait_for
from tests.integration.test_dashboard_fleet import Site
from tests.integration.test_metrics import Series, parse, value


def _fleet_series(series: Series, queue: str) -> dict[str, float | None]:
    return {
        name: value(series, name, queue=queue)
        for name in ("awa_fleet_limit_concurrency", "awa_fleet_limit_rate", "awa_fleet_running",
                     "awa_fleet_pool_min_workers", "awa_fleet_pool_weight")
    }  # fmt: skip


async def test_a_worker_shows_the_fleet_in_its_snapshot_and_metrics(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    gate = asyncio.Event()

    @client.task(None, kind="slow", queue="capped")
    async def slow(job: awa.Job[Any]) -> None:
        await gate.wait()

    @client.task(None, kind="member", queue="pooled")
    async def member(job: awa.Job[Any]) -> None:
        await gate.wait()

    stored = await client.set_queue_limits("capped", concurrency=1, rate_limit=50.0)
    assert stored is not None
    await client.set_fleet_pool(3, {"pooled": awa.PoolMember(min_workers=1, weight=2)})
    await client.insert_many([{}] * 3, kind="slow", queue="capped")
    await client.insert({}, kind="member", queue="pooled")
    metrics = awa.metrics.instrument(client, otel_enabled=False, stats_max_age_s=0)
    await client.start(
        [("capped", 4), ("pooled", 2), ("plain", 1)], **{**FAST_WORKER, **LIVE_SETTINGS}
    )
    try:

        async def held_at_the_cap() -> awa.RuntimeSnapshot | None:
            snap = client.runtime_snapshot()
            capped, pooled = snap.queues["capped"].fleet, snap.queues["pooled"].fleet
            ready = (
                capped is not None and capped.blocked == "concurrency" and capped.running == 1
                and pooled is not None and pooled.running == 1
            )  # fmt: skip
            return snap if ready else None

        snap = await wait_for(held_at_the_cap)
        capped = snap.queues["capped"].fleet
        assert capped is not None and capped.limits == stored and capped.holds >= 1
        assert (capped.pool_member, capped.pool_total) == (None, None)
        assert running_jobs(db, "capped") == 1  # what the fleet view says is what runs
        pooled = snap.queues["pooled"].fleet
        assert pooled is not None and pooled.limits is None
        assert (pooled.pool_member, pooled.pool_total) == (awa.PoolMember(1, 2), 3)
        assert snap.queues["plain"].fleet is None

        async def published() -> awa.QueueFleet | None:
            (instance,) = await client.list_runtime_instances()
            assert instance.snapshot is not None
            fleet = instance.snapshot.queues["capped"].fleet
            # A snapshot published between the claim that hit the cap and the next control
            # refresh shows the hold with the running count read before the job started.
            held = fleet is not None and fleet.blocked == "concurrency" and fleet.running == 1
            return fleet if held else None

        seen = await wait_for(published)
        assert seen.limits == stored

        series = parse(metrics.render())
        assert _fleet_series(series, "capped") == {
            "awa_fleet_limit_concurrency": 1, "awa_fleet_limit_rate": 50.0,
            "awa_fleet_running": 1, "awa_fleet_pool_min_workers": None,
            "awa_fleet_pool_weight": None,
        }  # fmt: skip
        assert _fleet_series(series, "pooled") == {
            "awa_fleet_limit_concurrency": None, "awa_fleet_limit_rate": None,
            "awa_fleet_running": 1, "awa_fleet_pool_min_workers": 1, "awa_fleet_pool_weight": 2,
        }  # fmt: skip
        assert value(series, "awa_fleet_pool_total") == 3
        assert set(_fleet_series(series, "plain").values()) == {None}
        holds = value(series, "awa_fleet_holds_total", queue="capped", reason="concurrency")
        assert holds is not None and holds >= 1

        # Cleared live: the worker's view and its gauges follow within a refresh.
        await client.clear_queue_limits("capped")

        async def cleared() -> bool:
            return client.runtime_snapshot().queues["capped"].fleet is None

        await wait_for(cleared)
        series = parse(metrics.render())
        assert value(series, "awa_fleet_limit_concurrency", queue="capped") is None
        assert value(series, "awa_fleet_running", queue="capped") is None
    finally:
        gate.set()
        await client.shutdown()


async def test_dashboard_metrics_read_the_fleet_from_the_database(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await client.set_queue_limits("email", concurrency=5, partition_by="tenant")
    await client.set_fleet_pool(
        12, {"email": awa.PoolMember(min_workers=4, weight=3), "reports": awa.PoolMember()}
    )
    await client.insert_many([{"tenant": "a"}] * 2, kind="k", queue="email")
    db.execute("SELECT * FROM awa.claim_coordinated('email', 1, 0, 'on')")  # one runs
    site = Site(database_url)
    try:
        reply = await site.get("/metrics")
    finally:
        await site.close()
    assert reply.status == 200
    series = parse(reply.body.encode())
    assert value(series, "awa_fleet_pool_total") == 12
    assert _fleet_series(series, "email") == {
        "awa_fleet_limit_concurrency": 5, "awa_fleet_limit_rate": None, "awa_fleet_running": 1,
        "awa_fleet_pool_min_workers": 4, "awa_fleet_pool_weight": 3,
    }  # fmt: skip
    assert _fleet_series(series, "reports") == {
        "awa_fleet_limit_concurrency": None, "awa_fleet_limit_rate": None,
        "awa_fleet_running": 0, "awa_fleet_pool_min_workers": 0, "awa_fleet_pool_weight": 1,
    }  # fmt: skip
    assert not any(name == "awa_queue_in_flight" for name, _ in series)  # no worker here


async def test_the_snapshot_names_a_partitioned_queues_busiest_partitions(
    client: awa.AsyncClient,
) -> None:
    gate = asyncio.Event()

    @client.task(None, kind="slow", queue="parted")
    async def slow(job: awa.Job[Any]) -> None:
        await gate.wait()

    await client.set_queue_limits("parted", concurrency=2, partition_by="tenant")
    await client.insert_many(
        [{"tenant": "a"}, {"tenant": "a"}, {"tenant": "b"}], kind="slow", queue="parted"
    )
    await client.start([("parted", 4)], **{**FAST_WORKER, **LIVE_SETTINGS})
    try:

        async def busiest() -> list[tuple[str, int]] | None:
            fleet = client.runtime_snapshot().queues["parted"].fleet
            top = fleet.top_partitions if fleet is not None else []
            return top if top == [("a", 2), ("b", 1)] else None

        await wait_for(busiest)

        async def published() -> bool:  # as `awa runtime list --json` shows it
            instances = await client.list_runtime_instances()
            snap = instances[0].snapshot if instances else None
            fleet = snap.queues["parted"].fleet if snap is not None else None
            return fleet is not None and fleet.top_partitions == [("a", 2), ("b", 1)]

        await wait_for(published)
    finally:
        gate.set()
        await client.shutdown()
