"""Ordering keys (ADR 0034) held by three real worker processes: for every key, no two
executions overlap and they start in insertion (id) order. Judged from the executions the
handlers recorded (tests.apps.fleet_app), never from awa's counters.
"""

from __future__ import annotations

import itertools

import awa
from awa import InsertItem
from tests.fleet.conftest import Fleet, Run, max_overlap
from tests.helpers import wait_for

KEYS = ("k0", "k1", "k2", "k3")


async def _all_done(client: awa.AsyncClient, fleet: Fleet, count: int) -> list[Run]:
    async def done() -> bool:
        return len(fleet.runs()) >= count

    await wait_for(done, timeout=90)
    fleet.stop()
    runs = fleet.runs()
    assert len(runs) == count and len({r.id for r in runs}) == count  # each ran once
    return runs


def _check_lines(runs: list[Run], inserted: dict[str, list[int]]) -> None:
    for key, ids in inserted.items():
        mine = sorted((r for r in runs if r.ordering_key == key), key=lambda r: r.start)
        assert [r.id for r in mine] == ids, key  # start order is id order
        for earlier, later in itertools.pairwise(mine):
            assert earlier.end <= later.start, (key, earlier, later)  # one at a time


async def _insert(client: awa.AsyncClient, queues: tuple[str, ...]) -> dict[str, list[int]]:
    """Eight jobs per key, spread over ``queues``, interleaved with key-less jobs."""
    items = []
    for n in range(8):
        for i, key in enumerate(KEYS):
            queue = queues[(n + i) % len(queues)]
            items.append(InsertItem({"ms": 40}, queue=queue, ordering_key=key))
            items.append(InsertItem({"ms": 40}, queue=queue))
    jobs = await client.insert_many(items, kind="fleet_work")
    inserted: dict[str, list[int]] = {}
    for job in jobs:
        if job.ordering_key is not None:
            inserted.setdefault(job.ordering_key, []).append(job.id)
    return inserted


async def test_three_processes_run_each_key_one_at_a_time_in_order(
    client: awa.AsyncClient, fleet: Fleet
) -> None:
    fleet.start(3, "left=4", "right=4")  # all three listen before the first job exists
    inserted = await _insert(client, ("left", "right"))  # a key spans both queues
    runs = await _all_done(client, fleet, 64)
    _check_lines(runs, inserted)
    keyed = [r for r in runs if r.ordering_key]
    assert len({r.pid for r in keyed}) > 1, keyed  # the keys moved between processes
    assert max_overlap([(r.start, r.end) for r in keyed]) > 1  # keys ran side by side


async def test_ordered_jobs_keep_their_line_under_a_fleet_cap(
    client: awa.AsyncClient, fleet: Fleet
) -> None:
    await client.set_queue_limits("capped", concurrency=3)
    fleet.start(3, "capped=4")
    inserted = await _insert(client, ("capped",))
    runs = await _all_done(client, fleet, 64)
    _check_lines(runs, inserted)
    assert max_overlap([(r.start, r.end) for r in runs]) <= 3
