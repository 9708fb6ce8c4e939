"""A worker cut off from the server (a network partition: nothing closes, nothing
answers) stops its handlers before their leases can lapse, so a job rescued and run
elsewhere never runs twice at once (CONTRACT §7; a fleet cap counts on it too).

Three real worker processes on one server: L leads maintenance (it serves another
queue), P reaches the server through a proxy that the test freezes while P's handler
runs, and G, started once P is cut off, runs the job after L rescued it. Each run's start
and end are recorded by the handler over a connection that bypasses the proxy.
"""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.conftest import SpawnWorker
from tests.chaos.partition import FreezableProxy
from tests.chaos.support import job_state, leader_app
from tests.helpers import wait_until

pytestmark = pytest.mark.chaos

# A beat every 300 ms, stale after 3 s: P stops a handler whose lease it could not confirm
# for 2.25 s, well before the leader may rescue its job.
SETTINGS = {"heartbeat_interval_ms": 300, "heartbeat_staleness_ms": 3_000}

RUNS_DDL = """
CREATE TABLE public.partition_runs (
    job_id     bigint NOT NULL,
    run_lease  bigint NOT NULL,
    pid        int NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    ended_by   text
)
"""


def _runs(db: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT run_lease, pid, started_at, ended_at, ended_by FROM public.partition_runs "
        "WHERE job_id = %s ORDER BY started_at",
        (job_id,),
    ).fetchall()


def test_a_cut_off_worker_stops_its_handler_before_the_job_runs_elsewhere(
    sync_client: awa.Client,
    db: psycopg.Connection[Any],
    database_url: str,
    proxy: FreezableProxy,
    spawn_worker: SpawnWorker,
) -> None:
    db.execute(RUNS_DDL)
    app = "tests.apps.partition_app"
    spawn_worker("other=1", app=app, name="awa_leader", settings=SETTINGS)
    wait_until(lambda: leader_app(db) == "awa_leader", timeout=30)
    cut = spawn_worker("cut=1", app=app, name="awa_cut", settings=SETTINGS, url=proxy.url,
                       env={"AWA_TEST_RECORD_URL": database_url})  # fmt: skip
    job = sync_client.insert({"ms": 15_000}, kind="long", queue="cut")
    wait_until(lambda: _runs(db, job.id), timeout=30)

    proxy.freeze()
    try:
        spawn_worker("cut=1", app=app, name="awa_other", settings=SETTINGS)
        wait_until(lambda: job_state(db, job.id) == "completed", timeout=30)
        wait_until(lambda: all(run[3] is not None for run in _runs(db, job.id)), timeout=30)
    finally:
        proxy.thaw()

    first, second = _runs(db, job.id)
    assert (first[0], first[1]) == (1, cut.pid)
    assert first[4] == "cancel"  # stopped, not run to its end
    assert first[3] < second[2], f"ran twice at once: {first} and {second}"
    assert second[0] > 1 and second[4] == "return"
    # Back on the network, the cut-off worker's late outcome changes nothing.
    cut.send_signal(signal.SIGTERM)
    assert cut.wait(30) == 0
    row = db.execute("SELECT state::text, run_lease FROM awa.jobs WHERE id = %s",
                     (job.id,)).fetchone()  # fmt: skip
    assert row == ("completed", second[0])
