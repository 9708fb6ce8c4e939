"""The hot path and the control plane through a real PgBouncer in transaction mode.

Every test runs twice: with LISTEN and the leader on a direct ``listen_url``, and with
nothing but the PgBouncer URL, where the worker polls and says so once. PgBouncer keeps
fewer server connections than the worker's pool, so consecutive statements of one
client connection run on different server sessions — what breaks session state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import awa
from awa.db import sql
from tests.chaos.support import Supervised, check_history, install_audit
from tests.helpers import FAST_WORKER, noop_task, wait_for, wait_until

POLLING_NOTE = "goes through a connection pooler"


@pytest.fixture(params=["listen_url", "polling"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def bounced(bouncer_url: str, database_url: str, mode: str) -> AsyncIterator[awa.AsyncClient]:
    """A client whose pool goes through PgBouncer; LISTEN on the direct URL, or none."""
    listen_url = database_url if mode == "listen_url" else None
    client = awa.AsyncClient(bouncer_url, max_connections=10, listen_url=listen_url)
    try:
        yield client
    finally:
        await client.close()


def _register(client: awa.AsyncClient, ran: list[tuple[int, int]]) -> None:
    @client.task(None, kind="bounce", queue="bounce")
    async def bounce(job: awa.Job[Any]) -> None:
        ran.append((job.id, job.attempt))
        if job.args.get("fail_first") and job.attempt == 1:
            raise RuntimeError("first attempt fails")
        await asyncio.sleep(job.args.get("ms", 0) / 1000)


async def _state(client: awa.AsyncClient, job_id: int) -> awa.JobState:
    return (await client.get_job(job_id)).state


async def test_concurrent_single_inserts_never_reuse_a_prepared_statement(
    bouncer_url: str,
) -> None:
    # psycopg prepares a statement after 5 runs on a connection; through PgBouncer the
    # next run lands on a server session that never saw it (or already has it).
    clients = [awa.AsyncClient(bouncer_url, max_connections=3) for _ in range(4)]
    try:
        inserted = await asyncio.gather(
            *(
                asyncio.gather(*(c.insert({"i": i}, kind="k", queue="q") for i in range(40)))
                for c in clients
            )
        )
        assert sum(len(jobs) for jobs in inserted) == 160
        assert len(await clients[0].list_jobs(queue="q", limit=1_000)) == 160
    finally:
        for c in clients:
            await c.close()


async def test_statements_through_psycopgs_cursor_are_never_prepared_there(
    bouncer_url: str,
) -> None:
    """Reads and writes through psycopg's cursor (queue_stats, a transaction's insert and
    SQL), each run many times at once on a few connections: prepared after five runs,
    the next landed on a server session without it, or with another statement of the
    same name (a review: DuplicatePreparedStatement, "bind message supplies 2
    parameters, but prepared statement _pg3_0 requires 5")."""
    client = awa.AsyncClient(bouncer_url, max_connections=8)

    async def in_a_transaction(i: int) -> None:
        async with client.transaction() as tx:
            await tx.insert({"i": i}, kind="k", queue="q")
            await tx.connection.execute("SELECT count(*) FROM awa.jobs WHERE queue = %s", ["q"])

    try:
        for round_ in range(8):
            await asyncio.gather(*(client.queue_stats() for _ in range(8)))
            await asyncio.gather(*(in_a_transaction(round_ * 8 + i) for i in range(8)))
        assert len(await client.list_jobs(queue="q", limit=1_000)) == 64
    finally:
        await client.close()


async def test_insert_claim_complete_heartbeat_retry_through_pgbouncer(
    bounced: awa.AsyncClient, db: psycopg.Connection[Any], mode: str, caplog: Any
) -> None:
    caplog.set_level(logging.WARNING, logger="awa")
    ran: list[tuple[int, int]] = []
    _register(bounced, ran)
    await bounced.start([("bounce", 8)], **FAST_WORKER)
    try:
        many = await bounced.insert_many(
            [{"ms": 5} for _ in range(200)], kind="bounce", queue="bounce"
        )
        async with bounced.transaction() as tx:
            in_tx = await tx.insert({"ms": 5}, kind="bounce", queue="bounce")
        # Longer than the heartbeat staleness: completes on attempt 1 only if heartbeats
        # went through.
        slow = await bounced.insert({"ms": 2_500}, kind="bounce", queue="bounce")
        # Fails once, then waits in retryable until the leader's promoter makes it due.
        retried = await bounced.insert({"fail_first": True}, kind="bounce", queue="bounce")
        ids = [j.id for j in many] + [in_tx.id, slow.id, retried.id]

        async def all_completed() -> bool:
            jobs = await bounced.list_jobs(queue="bounce", limit=1_000)
            return len(jobs) == len(ids) and all(j.state is awa.JobState.COMPLETED for j in jobs)

        await wait_for(all_completed, timeout=60)
        assert (await bounced.get_job(slow.id)).attempt == 1
        assert (await bounced.get_job(retried.id)).attempt == 2
        assert sorted(job_id for job_id, _ in ran) == sorted([*ids, retried.id])
    finally:
        await bounced.shutdown()
    notes = [r.getMessage() for r in caplog.records if POLLING_NOTE in r.getMessage()]
    assert len(notes) == (1 if mode == "polling" else 0)


async def test_cancel_pause_and_overrides_through_pgbouncer(
    bounced: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[tuple[int, int]] = []
    _register(bounced, ran)
    await bounced.start([("bounce", 2)], **FAST_WORKER, override_refresh_ms=100)
    try:
        running = await bounced.insert({"ms": 60_000}, kind="bounce", queue="bounce")

        async def is_running() -> bool:
            return await _state(bounced, running.id) is awa.JobState.RUNNING

        await wait_for(is_running, timeout=30)
        await bounced.cancel(running.id)  # the handler hears of it by notice or heartbeat

        async def handler_stopped() -> bool:
            return bounced.runtime_snapshot().queues["bounce"].in_flight == 0

        await wait_for(handler_stopped, timeout=30)
        assert await _state(bounced, running.id) is awa.JobState.CANCELLED

        await bounced.pause_queue("bounce")
        held = await bounced.insert({"ms": 1}, kind="bounce", queue="bounce")
        await bounced.set_runtime_overrides("bounce", claim_batch_size=1)

        async def override_applied() -> bool:
            snap = bounced.runtime_snapshot().queues["bounce"]
            return bool(snap.effective["claim_batch_size"] == 1)

        await wait_for(override_applied, timeout=30)
        assert await _state(bounced, held.id) is awa.JobState.AVAILABLE  # paused: not claimed
        await bounced.resume_queue("bounce")

        async def held_done() -> bool:
            return await _state(bounced, held.id) is awa.JobState.COMPLETED

        await wait_for(held_done, timeout=30)
    finally:
        await bounced.shutdown()


async def test_a_fleet_concurrency_limit_holds_through_pgbouncer(bounced: awa.AsyncClient) -> None:
    # The coordinated claim takes transaction-scoped locks only: two workers on one pool
    # of PgBouncer sessions never run more than the fleet's cap, judged from the handlers'
    # own recorded intervals.
    intervals: list[tuple[float, float]] = []
    loop = asyncio.get_running_loop()

    async def capped(job: awa.Job[Any]) -> None:
        start = loop.time()
        await asyncio.sleep(0.1)
        intervals.append((start, loop.time()))

    other = awa.AsyncClient(bounced.database_url, listen_url=bounced.listen_url)
    for client in (bounced, other):
        client.task(None, kind="capped", queue="capped")(capped)
    await bounced.set_queue_limits("capped", concurrency=2)
    await bounced.insert_many([{}] * 16, kind="capped", queue="capped")
    await bounced.start([("capped", 8)], **FAST_WORKER)
    await other.start([("capped", 8)], **FAST_WORKER)
    try:

        async def all_ran() -> bool:
            return len(intervals) == 16

        await wait_for(all_ran, timeout=60)
    finally:
        await other.shutdown()
        await other.close()
        await bounced.shutdown()
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:  # an end sorts before a start at the same instant
        running += step
        peak = max(peak, running)
    assert peak == 2


def test_a_supervised_fleet_through_pgbouncer(
    bouncer_url: str, database_url: str, db: psycopg.Connection[Any], mode: str
) -> None:
    install_audit(db)
    listen = ["--listen-url", database_url] if mode == "listen_url" else []
    sup = Supervised(
        bouncer_url, "--processes", "2", "--queue", "fleet=4", *listen,
        AWA_TEST_RECORD_URL=database_url,  # the handlers' own log goes direct
    )  # fmt: skip
    try:
        pids = sup.child_pids(2)
        with awa.Client(bouncer_url) as producer:
            jobs = producer.insert_many([{"ms": 20}] * 200, kind="fleet_sleep", queue="fleet")
        ids = [job.id for job in jobs]

        def all_completed() -> bool:
            rows = db.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
            return dict(rows) == {"completed": len(ids)}

        wait_until(all_completed, timeout=60)
        check_history(db, set(ids))
        ran = dict(db.execute("SELECT pid, count(*) FROM chaos_exec GROUP BY pid").fetchall())
        assert set(ran) <= set(pids.values()) and sum(ran.values()) == len(ids)
        assert sup.stop() == 0
    finally:
        sup.kill()
    notes = [line for line in sup.lines if POLLING_NOTE in line]
    assert len(notes) == (2 if mode == "polling" else 0)  # once per child


async def test_a_leader_behind_pgbouncer_keeps_its_lease_when_a_server_session_ends(
    bouncer_url: str, db: psycopg.Connection[Any]
) -> None:
    """PgBouncer closes server sessions on its own (server_lifetime, idle timeouts): a
    leader with no direct URL must not look crashed when the one its last renewal ran on
    goes, or another worker takes the lease from a live leader."""
    client = awa.AsyncClient(bouncer_url, max_connections=4)
    noop_task(client, queue="bounce")
    await client.start([("bounce", 1)], **{**FAST_WORKER, "leader_election_interval_ms": 60_000})
    try:

        async def leading() -> bool:
            return client.runtime_snapshot().leader

        await wait_for(leading)
        # Every server session but ours ends, PgBouncer's included.
        db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        taken = db.execute(
            sql.LEADER_LEASE_ACQUIRE, {"holder": "other", "lease_ms": 60_000, "watched": True}
        ).fetchone()
        assert taken is None  # the lease is unexpired and no backend of its holder can end
    finally:
        await client.shutdown()
        await client.close()


async def test_the_polling_note_names_listen_url_when_it_is_the_pooled_one(
    bouncer_url: str, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = awa.AsyncClient(database_url, listen_url=bouncer_url)
    noop_task(client, queue="bounce")
    caplog.set_level(logging.WARNING, logger="awa")
    await client.start([("bounce", 1)], **FAST_WORKER)
    try:

        async def noted() -> list[str]:
            return [r.getMessage() for r in caplog.records if POLLING_NOTE in r.getMessage()]

        [note] = await wait_for(noted)
        assert note.startswith("listener: listen_url goes through a connection pooler")
    finally:
        await client.shutdown()
        await client.close()
