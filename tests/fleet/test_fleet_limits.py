"""Fleet-wide queue limits (CONTRACT §8) held by several real worker processes.

Every verdict comes from the executions the handlers recorded (tests.apps.fleet_app),
never from awa's counters.
"""

from __future__ import annotations

from typing import Any

import psycopg

import awa
from tests.fleet.conftest import Fleet, max_overlap, most_in_window
from tests.helpers import wait_for


async def _all_done(client: awa.AsyncClient, fleet: Fleet, count: int) -> None:
    async def done() -> bool:
        return len(fleet.runs()) >= count

    await wait_for(done, timeout=60)
    await wait_for(lambda: _no_work_left(client), timeout=30)


async def _no_work_left(client: awa.AsyncClient) -> bool:
    stats = await client.queue_stats()
    return all(s.available == s.running == s.scheduled == s.retryable == 0 for s in stats)


async def test_a_fleet_cap_is_never_exceeded_by_three_processes_claiming_at_once(
    client: awa.AsyncClient, fleet: Fleet
) -> None:
    await client.set_queue_limits("capped", concurrency=4)
    await client.insert_many([{"ms": 40}] * 60, kind="fleet_work", queue="capped")
    fleet.start(3, "capped=2")  # 6 local permits against a fleet cap of 4: two must share
    await _all_done(client, fleet, 60)
    fleet.stop()
    runs = fleet.runs()
    assert sorted(r.id for r in runs) == sorted({r.id for r in runs})  # each ran once
    assert len(runs) == 60
    peak = max_overlap([(r.start, r.end) for r in runs])
    assert peak <= 4
    assert peak == 4  # the cap is used, not merely respected
    assert len({r.pid for r in runs}) > 1  # the work really was shared


async def test_a_fleet_rate_limit_holds_over_every_window(
    client: awa.AsyncClient, fleet: Fleet
) -> None:
    await client.set_queue_limits("paced", rate_limit=10.0, burst=3)
    await client.insert_many([{"ms": 1}] * 45, kind="fleet_work", queue="paced")
    fleet.start(3, "paced=16")
    await _all_done(client, fleet, 45)
    fleet.stop()
    starts = [r.attempted_at for r in fleet.runs()]
    assert len(starts) == 45
    # Any window of T seconds holds at most rate × T + burst starts, fleet-wide.
    for window in (1.0, 3.0):
        assert most_in_window(starts, window) <= 10 * window + 3
    # Three processes at 10/s each would have let the burst of the other two through.
    assert most_in_window(starts, 0.05) <= 4


async def test_a_busy_partition_never_delays_the_others(
    client: awa.AsyncClient, fleet: Fleet
) -> None:
    await client.set_queue_limits("tenants", concurrency=1, partition_by="tenant")
    # Tenant a's backlog comes first in queue order; b and c arrive behind it.
    await client.insert_many([{"ms": 400, "tenant": "a"}] * 8, kind="fleet_work", queue="tenants")
    await client.insert_many(
        [{"ms": 10, "tenant": t} for t in ("b", "c") for _ in range(4)],
        kind="fleet_work",
        queue="tenants",
    )
    fleet.start(2, "tenants=8")
    await _all_done(client, fleet, 16)
    fleet.stop()
    runs = fleet.runs()
    for tenant in ("a", "b", "c"):
        mine = [(r.start, r.end) for r in runs if r.tenant == tenant]
        assert max_overlap(mine) == 1  # the per-key cap holds
    a_starts = sorted(r.start for r in runs if r.tenant == "a")
    others_done = max(r.end for r in runs if r.tenant in ("b", "c"))
    # b and c were never stuck behind a's backlog: all done before a's third job began.
    assert others_done < a_starts[2]


async def test_limits_changed_live_apply_without_a_restart(
    client: awa.AsyncClient, fleet: Fleet, db: psycopg.Connection[Any]
) -> None:
    await client.set_queue_limits("live", concurrency=2)
    await client.insert_many([{"ms": 300}] * 400, kind="fleet_work", queue="live")
    # A cadence far longer than the test: only the notice can carry the change.
    fleet.start(2, "live=10", override_refresh_ms=600_000)

    def running() -> int:
        row = db.execute(
            "SELECT count(*) FROM awa.jobs WHERE queue = 'live' AND state = 'running'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    async def at(n: int) -> bool:
        return running() == n

    await wait_for(lambda: at(2))
    await client.set_queue_limits("live", concurrency=7)
    await wait_for(lambda: at(7))
    await client.set_queue_limits("live", concurrency=3)  # shrinks as jobs end, none cut
    await wait_for(lambda: at(3))
    await client.clear_queue_limits("live")  # back to per-process permits: 2 × 10
    await wait_for(lambda: at(20))
    await client.drain_queue("live")
    await wait_for(lambda: at(0))
    fleet.stop()
    # No execution was cut by a change: every job that started ran once to its end (a
    # cut handler writes no record, and its job would be retried: attempt 2, or not
    # completed), and each one recorded is one the database saw complete.
    claimed = db.execute(
        "SELECT id, state::text, attempt FROM awa.jobs WHERE queue = 'live' AND attempt > 0"
    ).fetchall()
    assert claimed and {(state, attempt) for _, state, attempt in claimed} == {("completed", 1)}
    recorded = [r.id for r in fleet.runs()]
    assert sorted(recorded) == sorted(job_id for job_id, _, _ in claimed)
