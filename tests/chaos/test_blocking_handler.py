"""A handler that blocks the event loop longer than the heartbeat staleness.

While the loop is blocked its process sends no heartbeat. Two outcomes are allowed: the
job is not rescued while its process is alive, or it is rescued and the late attempt is
fenced — and either way each job ends exactly once in a final state, by the attempt that
held it (``tests.chaos.support.check_history``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.conftest import SpawnWorker
from tests.chaos.support import Recorder, check_history, install_audit
from tests.helpers import FAST_WORKER, noop_task, wait_for

pytestmark = pytest.mark.chaos

BLOCK_MS = 4 * FAST_WORKER["heartbeat_staleness_ms"] // 2  # 2 × staleness


def _finished(db: psycopg.Connection[Any], ids: set[int]) -> bool:
    row = db.execute(
        "SELECT count(*) FROM awa.jobs WHERE id = ANY(%s) "
        "AND state IN ('completed', 'failed', 'cancelled')",
        (list(ids),),
    ).fetchone()
    return row is not None and row[0] == len(ids)


async def test_blocked_loop_is_rescued_by_another_process_and_the_late_attempt_fenced(
    client: awa.AsyncClient, db: psycopg.Connection[Any], spawn_worker: SpawnWorker
) -> None:
    install_audit(db)
    # This process leads (rescue, promotion) but runs no "chaos" jobs; the subprocess
    # runs them, and its loop is blocked by the first attempt of one job.
    noop_task(client, queue="elsewhere")
    await client.start([("elsewhere", 1)], **FAST_WORKER)
    try:
        await wait_for(lambda: _leads(client), timeout=30)
        spawn_worker("chaos=4", app="tests.chaos.audited_app")
        blocker = await client.insert({"block_ms": BLOCK_MS}, kind="audited", queue="chaos")
        others = await client.insert_many([{"ms": 20} for _ in range(30)], kind="audited",
                                          queue="chaos")  # fmt: skip
        ids = {blocker.id, *(j.id for j in others)}
        await wait_for(lambda: asyncio.to_thread(_finished, db, ids), timeout=60)
        # The blocked first attempt also finishes (late) and logs its execution.
        await wait_for(
            lambda: asyncio.to_thread(
                lambda: len(check_history(db, ids)["executions"].get(blocker.id, [])) == 2
            ),
            timeout=30,
        )
    finally:
        await client.shutdown()
    history = check_history(db, ids)
    job = await client.get_job(blocker.id)
    assert job.state is awa.JobState.COMPLETED
    # Rescued once while its process was alive but silent, before its first heartbeat: its
    # attempt given back (once in its life)…
    assert [e["type"] for e in job.errors] == ["NeverHeartbeated"]
    assert job.attempt == 1 and job.run_lease == 3  # claim, rescue, claim
    # …both attempts ran to the end, and only the second one's outcome was written.
    (first, second) = sorted(history["executions"][blocker.id])
    assert first[0] == 1 and second == (job.run_lease, job.attempted_at)
    [final] = history["finals"][blocker.id]
    assert final[2:] == ("completed", 3, job.attempted_at)


async def test_blocked_loop_of_the_leader_itself(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The blocked process is the only one, and the leader: nobody can rescue while it is
    blocked; once it wakes, its heartbeat and its rescuer race — both ends are correct."""
    install_audit(db)
    recorder = Recorder(database_url)

    @client.task(None, kind="blocky", queue="q")
    async def blocky(job: awa.Job[Any]) -> None:
        if job.run_lease == 1 and job.args.get("block_ms"):  # its first claim only
            time.sleep(job.args["block_ms"] / 1000)  # noqa: ASYNC251 (blocks this very loop)
        else:
            await asyncio.sleep(0.01)
        recorder.record(job)

    await client.start([("q", 4)], **FAST_WORKER)
    try:
        await wait_for(lambda: _leads(client), timeout=30)
        blocker = await client.insert({"block_ms": BLOCK_MS}, kind="blocky", queue="q")
        others = await client.insert_many([{} for _ in range(10)], kind="blocky", queue="q")
        ids = {blocker.id, *(j.id for j in others)}
        await wait_for(lambda: asyncio.to_thread(_finished, db, ids), timeout=60)
    finally:
        await client.shutdown()
        recorder.close()
    history = check_history(db, ids)
    job = await client.get_job(blocker.id)
    assert job.state is awa.JobState.COMPLETED
    if job.run_lease == 1:  # not rescued: the heartbeat won the race
        assert job.errors == [] and job.attempt == 1
    else:  # rescued once, the late attempt fenced; before any heartbeat, its attempt given
        # back (the usual case: the handler blocked the loop from its start)
        assert job.run_lease == 3
        assert [(e["type"], job.attempt) for e in job.errors] in (
            [("NeverHeartbeated", 1)],
            [("HeartbeatStale", 2)],
        )
    # Every claim ran to its end; the one that finished the job holds its lease.
    assert len(history["executions"][blocker.id]) == (job.run_lease + 1) // 2
    assert history["executions"][blocker.id][-1] == (job.run_lease, job.attempted_at)


async def _leads(client: awa.AsyncClient) -> bool:
    return (await client.health_check()).leader


async def test_a_job_reclaimed_while_its_old_attempt_still_runs_keeps_its_lease(
    client: awa.AsyncClient,
) -> None:
    """A plain ``def`` handler cannot be interrupted: cancelled and retried while it runs,
    its job is claimed again by the same worker. When the old attempt finally returns, the
    new one must still be tracked — heartbeated, cancellable, fenced at shutdown."""
    release_first = threading.Event()
    release_second = threading.Event()

    @client.task(None, kind="stubborn", queue="q")
    def stubborn(job: awa.Job[Any]) -> None:
        (release_first if job.attempt == 1 else release_second).wait(30)

    await client.start([("q", 2)], **FAST_WORKER)
    worker = client._worker
    try:
        job = await client.insert({}, kind="stubborn", queue="q")

        async def attempt_running(n: int) -> bool:
            keys = worker.executor.in_flight()
            return any(k[0] == job.id and k[1] == n for k in keys)

        await wait_for(lambda: attempt_running(1))
        await client.cancel(job.id)  # the thread ignores it and keeps running
        await client.retry(job.id)  # available again: claimed by this same worker
        await wait_for(lambda: attempt_running(2))
        release_first.set()
        await wait_for(lambda: _ended(worker, 1))
        # The old attempt ended; the new one is still this worker's to heartbeat…
        assert [k[:2] for k in worker.executor.in_flight()] == [(job.id, 2)]
        lost = await _beat(worker)
        assert lost == 0
        assert (await client.get_job(job.id)).state is awa.JobState.RUNNING
        release_second.set()
        done = await wait_for(lambda: _state_is(client, job.id, awa.JobState.COMPLETED))
        assert done
    finally:
        release_first.set()
        release_second.set()
        await client.shutdown()


async def _ended(worker: Any, attempts: int) -> bool:
    return bool(worker.executor.finished >= attempts)


async def _state_is(client: awa.AsyncClient, job_id: int, state: awa.JobState) -> bool:
    return (await client.get_job(job_id)).state is state


async def _beat(worker: Any) -> int:
    from awa.worker import heartbeat

    lost: int = await heartbeat.beat(worker.pool, worker.executor, worker.completer)
    return lost


async def test_a_stale_outcome_waiting_to_be_written_does_not_hide_the_new_attempt(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """The completer still holds the outcome of attempt 1 (say its flushes fail while the
    database is unreachable) when this worker claims attempt 2 of the same job: the
    heartbeat must renew attempt 2, not stop it as if its lease were lost."""
    from awa.worker import heartbeat

    job = await client.insert({}, kind="k", queue="q")
    keys = []
    for _ in range(2):  # claim, lose the lease (a cancel + retry), claim again
        row = db.execute(
            "UPDATE awa.jobs SET state = 'running', run_lease = run_lease + 1, "
            "attempted_at = clock_timestamp(), heartbeat_at = now() - interval '1 minute' "
            "WHERE id = %s RETURNING id, run_lease, attempted_at",
            (job.id,),
        ).fetchone()
        keys.append(row)
    cancelled: list[tuple[int, int | None]] = []
    confirmed: list[Any] = []

    class Executor:
        def in_flight(self) -> list[Any]:
            return [keys[1]]

        def cancel(self, job_id: int, reason: str, lease: int | None = None) -> bool:
            cancelled.append((job_id, lease))
            return True

        def lease_confirmed(self, keys: list[Any], alive: set[int], sent: float) -> None:
            confirmed.extend(key for key in keys if key[0] in alive)

    class Completer:
        def attempts(self) -> list[Any]:
            return [keys[0]]

    pool = await client._get_pool()
    lost = await heartbeat.beat(pool, Executor(), Completer())  # type: ignore[arg-type]
    assert (lost, cancelled, confirmed) == (0, [], [keys[1]])
    row = db.execute(
        "SELECT heartbeat_at > now() - interval '10 seconds' FROM awa.jobs WHERE id = %s",
        (job.id,),
    ).fetchone()
    assert row == (True,)
