"""Single inserts reuse one held connection, without limiting concurrency to one."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import FAST_WORKER, wait_for


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


async def test_an_idle_lane_gives_its_connection_to_a_caller_that_finds_none(
    database_url: str,
) -> None:
    """With one connection in all, the lane's held connection goes to whoever needs it."""
    async with awa.AsyncClient(database_url, max_connections=1) as client:
        await client.insert({}, kind="k")  # the lane now holds the only connection

        async def in_a_transaction() -> Any:
            async with client.transaction() as tx:
                return await tx.fetch_one("SELECT count(*) FROM awa.jobs")

        assert await asyncio.wait_for(in_a_transaction(), timeout=10) == {"count": 1}
        await client.insert({}, kind="k")  # and the lane takes it again


async def test_a_worker_and_a_producer_share_a_single_connection(database_url: str) -> None:
    """The completer's lane and the insert lane hold a connection only while nobody else
    needs one: a worker with one connection in all still claims, heartbeats and writes."""
    async with awa.AsyncClient(database_url, max_connections=1) as client:
        done: list[int] = []

        @client.task(None, kind="k")
        async def handler(job: awa.Job[Any]) -> None:
            done.append(job.args["i"])

        await client.start([("default", 4)], **FAST_WORKER)
        try:
            for i in range(40):
                await client.insert({"i": i}, kind="k")

            async def all_done() -> bool:
                return len(done) >= 40

            await wait_for(all_done, timeout=60)
        finally:
            await client.shutdown()
    assert sorted(done) == list(range(40))


async def test_a_busy_lane_gives_its_connection_to_a_caller_waiting_meanwhile(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """A caller that finds the only connection in the middle of a lane's statement gets it
    once that statement ends, not at the pool's timeout."""
    async with awa.AsyncClient(database_url, max_connections=1) as client:
        await client.insert({}, kind="k")
        with db.transaction():  # the next insert waits on this lock, its lane busy
            db.execute("LOCK TABLE awa.jobs IN EXCLUSIVE MODE")
            insert = asyncio.ensure_future(client.insert({}, kind="k"))

            async def insert_waits() -> bool:
                row = db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchone()
                return row is not None and row[0] > 0

            await wait_for(insert_waits)

            async def in_a_transaction() -> Any:
                async with client.transaction() as tx:
                    return await tx.fetch_one("SELECT count(*) AS n FROM awa.jobs")

            other = asyncio.ensure_future(in_a_transaction())

            async def other_waits() -> bool:
                return client._pool is not None and client._pool.waiting > 0

            await wait_for(other_waits)
        await insert
        assert await asyncio.wait_for(other, timeout=10) == {"n": 2}


async def test_a_worker_gives_back_every_connection_it_held(database_url: str) -> None:
    """The completer's and the dispatchers' lanes hold connections while the worker runs
    and return them when it shuts down."""
    async with awa.AsyncClient(database_url, max_connections=10) as client:
        done: list[int] = []

        @client.task(None, kind="k")
        async def handler(job: awa.Job[Any]) -> None:
            done.append(job.args["i"])

        await client.insert_many([{"i": i} for i in range(50)], kind="k")
        await client.start([("default", 4), ("other", 2)], **FAST_WORKER)
        try:

            async def all_done() -> bool:
                return len(done) >= 50

            await wait_for(all_done, timeout=60)
        finally:
            await client.shutdown()
        stats = client._pool.get_stats()  # type: ignore[union-attr]
        assert stats["pool_available"] == stats["pool_size"]


async def test_idle_lanes_give_their_connections_back_when_the_server_refuses_more(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """The pool asked idle lanes for their connections only once it had opened all it
    may; a server refusing more (a role's CONNECTION LIMIT, max_connections used up by
    others) kept it short of that, and every other caller timed out while the lanes'
    connections sat idle — a worker's due jobs waited minutes (a review)."""
    from psycopg import conninfo, sql

    from awa.db.lane import ConnectionLane

    role = f"limited_{db.info.backend_pid}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 2 IN ROLE {}").format(
        sql.Identifier(role), sql.Identifier(db.info.user)))  # fmt: skip
    try:
        url = conninfo.make_conninfo(database_url, user=role)
        async with awa.AsyncClient(url, max_connections=4) as client:
            pool = await client._get_pool()
            lanes = [ConnectionLane(), ConnectionLane()]
            for lane in lanes:  # each keeps one: the role's two
                async with lane.connection(pool) as conn:
                    await conn.execute("SELECT 1")
            async with pool.connection(timeout=5) as conn:  # was a PoolTimeout
                await conn.execute("SELECT 1")
            for lane in lanes:
                await lane.close(pool)
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def test_a_pool_timeout_names_the_whole_wait(database_url: str) -> None:
    """Asking the idle lanes after 0.5 s split the wait in two, and the error named only
    the second part ("after 2.50 sec" for a 3 s timeout; a review)."""
    client = awa.AsyncClient(database_url, max_connections=1)
    client.pool_timeout_s = 1.0  # before its pool opens
    async with client:
        await client.insert({}, kind="k")  # the insert lane now holds the one connection
        async with client.transaction():  # takes it back from the lane, and keeps it
            with pytest.raises(awa.DatabaseError, match=r"after 1\.00 sec"):
                await client.queue_stats()


async def test_conflicting_single_inserts_one_after_another_wait_for_no_patrol(
    client: awa.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder of a conflict is looked up with a psycopg cursor on the lane's kept
    connection: psycopg's wait took the socket's registration over and removed it, and the
    next insert waited for the patrol's look (1 s: every other conflict, a review). With
    the patrol an hour away, each insert still returns as soon as its reply is in."""
    import awa.db.direct

    monkeypatch.setattr(awa.db.direct, "PATROL_S", 3600.0)
    first = await client.insert({"n": 1}, kind="k", unique_opts={"by_args": True})
    for _ in range(3):
        with pytest.raises(awa.UniqueConflict) as refused:
            await asyncio.wait_for(
                client.insert({"n": 1}, kind="k", unique_opts={"by_args": True}), timeout=30
            )
        assert refused.value.existing_id == first.id
    assert (await asyncio.wait_for(client.insert({"n": 2}, kind="k"), timeout=30)).id
