"""SIGKILL a worker mid-batch: the survivors rescue its jobs, nothing is lost."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.conftest import SpawnWorker
from tests.helpers import FAST_WORKER, noop_task, wait_for

pytestmark = pytest.mark.chaos


def _counts(db: psycopg.Connection[Any]) -> dict[str, int]:
    rows = db.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
    return dict(rows)


async def test_sigkill_mid_batch_loses_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any], spawn_worker: SpawnWorker
) -> None:
    total = 300
    survivor = spawn_worker("chaos=4")
    victim = spawn_worker("chaos=16")
    # Jobs arrive once both run, and last long enough that the victim dies mid-batch.
    await client.insert_many([{"ms": 100} for _ in range(total)], kind="chaos_sleep", queue="chaos")

    async def victim_is_busy() -> bool:
        counts = _counts(db)
        return counts.get("running", 0) >= 8 and counts.get("completed", 0) >= 20

    await wait_for(victim_is_busy, timeout=60)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    async def all_done() -> bool:
        return _counts(db).get("completed", 0) == total

    await wait_for(all_done, timeout=90)
    assert _counts(db) == {"completed": total}
    # The victim's in-flight jobs came back; killed before their first heartbeat, each got
    # its attempt back (once in its life) rather than spend it.
    rescued = db.execute(
        "SELECT count(*) FROM awa.jobs WHERE errors @? "
        '\'$[*] ? (@.type == "HeartbeatStale" || @.type == "NeverHeartbeated")\''
    ).fetchone()
    assert rescued is not None and rescued[0] >= 1
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(15) == 0


async def test_sigterm_is_a_graceful_shutdown(
    client: awa.AsyncClient, db: psycopg.Connection[Any], spawn_worker: SpawnWorker
) -> None:
    await client.insert_many([{"ms": 2_000} for _ in range(4)], kind="chaos_sync", queue="chaos")
    worker = spawn_worker("chaos=4")

    async def all_running() -> bool:
        return _counts(db).get("running", 0) == 4

    await wait_for(all_running, timeout=30)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    counts = _counts(db)
    assert counts.get("running", 0) == 0 and sum(counts.values()) == 4
    assert set(counts) <= {"completed", "retryable", "available"}


async def test_leader_killed_another_takes_over_maintenance(
    client: awa.AsyncClient, db: psycopg.Connection[Any], spawn_worker: SpawnWorker
) -> None:
    first = spawn_worker("chaos=2")

    async def leader_pid() -> int | None:
        row = db.execute(
            "SELECT pid FROM awa.runtime_instances WHERE is_leader ORDER BY last_seen_at DESC"
        ).fetchone()
        return None if row is None else int(row[0])

    assert await wait_for(leader_pid, timeout=30) == first.pid
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    noop_task(client, queue="other")
    await client.start([("other", 1)], **FAST_WORKER)
    try:
        await wait_for(lambda: _is_leader(client), timeout=30)
        # Promotion works under the new leader.
        job = await client.insert({"ms": 1}, kind="chaos_sleep", queue="chaos")
        db.execute(
            "UPDATE awa.jobs SET state = 'scheduled', run_at = now() WHERE id = %s", (job.id,)
        )

        async def promoted() -> bool:
            return (await client.get_job(job.id)).state is awa.JobState.AVAILABLE

        await wait_for(promoted, timeout=30)
    finally:
        await client.shutdown()


async def _is_leader(client: awa.AsyncClient) -> bool:
    return (await client.health_check()).leader
