"""The application's calls across a database restart (issue 12.2).

After a restart every idle pooled connection is dead. A connection the server already
closed must never be lent (its goodbye is waiting in the socket), so the first call on
it does not fail; a read whose connection dies under it is read again; only a write that
was in flight while the server went down may fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.test_db_restart import _restart
from tests.conftest import PgServer
from tests.helpers import wait_for, wait_until

pytestmark = pytest.mark.chaos

POOLED = 6


async def _fill_pool(client: awa.AsyncClient, n: int) -> None:
    """Make the pool hold ``n`` connections at once, then leave them all idle."""
    barrier = asyncio.Barrier(n)

    async def hold() -> None:
        async with client.transaction():
            await barrier.wait()

    await asyncio.gather(*(hold() for _ in range(n)))


def _backends(db: psycopg.Connection[Any]) -> list[int]:
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    ).fetchall()
    return [int(pid) for (pid,) in rows]


def _calls(client: awa.AsyncClient, job_id: int) -> list[Callable[[], Awaitable[object]]]:
    """One of each kind of call an application makes: writes and reads."""

    async def in_transaction() -> None:
        async with client.transaction() as tx:
            await tx.insert({"via": "tx"}, kind="k")

    return [
        lambda: client.insert({"n": 1}, kind="k"),
        lambda: client.get_job(job_id),
        lambda: client.insert_many([{"n": 2}, {"n": 3}], kind="k"),
        lambda: client.list_jobs(limit=5),
        client.queue_stats,
        in_transaction,
        lambda: client.queue_runtime_overrides("q"),
        client.list_runtime_instances,
        client.check_schema,
    ]


async def test_killed_idle_connections_fail_no_call(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Every pooled connection is killed while idle (what a restart or a failover does
    to them): each kind of call, made more times than the pool has connections, succeeds
    — before the fix the first call on each dead connection failed."""
    job = await client.insert({}, kind="k")
    await _fill_pool(client, POOLED)
    pids = _backends(db)
    assert len(pids) >= POOLED
    db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
    await wait_for(lambda: asyncio.to_thread(lambda: not set(pids) & set(_backends(db))))
    for call in _calls(client, job.id) * 2:
        await call()  # raises on failure
    pool = await client._get_pool()
    assert getattr(pool, "dead_discarded", 0) >= POOLED  # found dead at checkout, not lent


def test_killed_idle_connections_fail_no_call_of_the_sync_client(
    sync_client: awa.Client, db: psycopg.Connection[Any]
) -> None:
    job = sync_client.insert({}, kind="k")
    for _ in range(3):
        pids = _backends(db)
        db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        # Dead and idle, as after a restart (a backend still exiting has not said so yet).
        wait_until(lambda: not set(pids) & set(_backends(db)))  # noqa: B023
        assert sync_client.get_job(job.id).id == job.id
        assert sync_client.insert({}, kind="k").id > job.id


@dataclass(frozen=True)
class Call:
    name: str
    started: float
    ended: float
    error: str | None


async def test_a_restart_under_continuous_calls_fails_no_read_and_no_later_call(
    client: awa.AsyncClient, pg_server: PgServer
) -> None:
    """Four tasks call the client without pause while the server restarts. Reads never
    fail (a read that loses its connection is read again once the server is back); a
    write fails only if it was under way while the server went down; every call that
    started after the restart succeeds."""
    job = await client.insert({}, kind="k")
    await _fill_pool(client, POOLED)
    calls: list[Call] = []
    stop = asyncio.Event()
    kinds = _calls(client, job.id)
    names = ["insert", "get_job", "insert_many", "list_jobs", "queue_stats", "transaction",
             "queue_runtime_overrides", "list_runtime_instances", "check_schema"]  # fmt: skip

    async def caller(offset: int) -> None:
        i = offset
        while not stop.is_set():
            name, call = names[i % len(kinds)], kinds[i % len(kinds)]
            started = time.monotonic()
            error = None
            try:
                await call()
            except awa.DatabaseError as exc:
                error = str(exc)
            calls.append(Call(name, started, time.monotonic(), error))
            i += 1

    tasks = [asyncio.create_task(caller(k)) for k in range(4)]
    try:
        await wait_for(lambda: _at_least(calls, 40, after=0.0), timeout=30)
        down = time.monotonic()
        await asyncio.to_thread(_restart, pg_server)
        up = time.monotonic()
        await wait_for(lambda: _at_least(calls, 40, after=up), timeout=60)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    failed = [c for c in calls if c.error is not None]
    reads = {"get_job", "list_jobs", "queue_stats", "queue_runtime_overrides",
             "list_runtime_instances", "check_schema"}  # fmt: skip
    assert [c for c in failed if c.name in reads] == []
    assert [c for c in failed if not (c.started < up and c.ended > down)] == []
    assert all(c.error is None for c in calls if c.started > up)


async def _at_least(calls: list[Call], n: int, *, after: float) -> bool:
    return sum(1 for c in calls if c.started > after and c.error is None) >= n
