"""Single inserts reuse one held connection, without limiting concurrency to one."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import awa


def _backends(db: psycopg.Connection[Any]) -> set[int]:
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    ).fetchall()
    return {pid for (pid,) in rows}


async def test_sequential_and_concurrent_inserts_all_land(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    first = await client.insert({"i": 0}, kind="k")
    for i in range(1, 5):
        await client.insert({"i": i}, kind="k")
    jobs = await asyncio.gather(*(client.insert({"i": i}, kind="k") for i in range(5, 15)))
    assert len({job.id for job in [first, *jobs]}) == 11
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (15,)


async def test_a_broken_lane_connection_is_replaced(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.insert({}, kind="k")
    for pid in _backends(db):
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    outcomes = []
    for _ in range(3):  # the dead connection fails at most one insert, then is replaced
        try:
            outcomes.append((await client.insert({}, kind="k")).id > 0)
        except awa.DatabaseError:
            outcomes.append(False)
    assert outcomes[-2:] == [True, True]
    await client.close()  # gives the held connection back before closing the pool
