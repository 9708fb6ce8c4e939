"""A frozen maintenance leader (SIGSTOP) loses its lease; woken (SIGCONT), it cannot act.

Two real worker processes, told apart in the database by their ``application_name``.
The leader is frozen: its lease expires, the other worker takes it and maintenance goes
on (a job due in one second is promoted and run while the old leader is still stopped).
Then the old leader wakes with due jobs everywhere around it: it must not promote or
rescue anything — its lease epoch is stale — and it must step down. Every job ends
exactly once, by its latest attempt.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.conftest import SpawnWorker
from tests.chaos.support import check_history, install_audit, job_state, leader_app
from tests.helpers import wait_for

pytestmark = pytest.mark.chaos

LEASE = {"leader_lease_ms": 1_000}  # renewed every 100 ms (FAST_WORKER)

MAINTENANCE_LOG = """
CREATE TABLE public.frozen_maintenance (
    job_id    bigint NOT NULL,
    old_state text NOT NULL,
    new_state text NOT NULL,
    by_app    text NOT NULL,
    at        timestamptz NOT NULL
);
CREATE FUNCTION public.frozen_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.frozen_maintenance VALUES (NEW.id, OLD.state::text, NEW.state::text,
        current_setting('application_name'), clock_timestamp());
    RETURN NULL;
END $$;
-- Only what the leader does: promotions, and rescues (which bump run_lease while
-- leaving running; the worker's own outcomes keep the lease).
CREATE TRIGGER frozen_log AFTER UPDATE OF state ON awa.jobs FOR EACH ROW
    WHEN ((OLD.state IN ('scheduled', 'retryable') AND NEW.state = 'available')
       OR (OLD.state = 'running' AND NEW.run_lease > OLD.run_lease))
    EXECUTE FUNCTION public.frozen_log();
"""


async def test_a_frozen_leader_is_replaced_and_cannot_act_when_it_wakes(
    client: awa.AsyncClient, db: psycopg.Connection[Any], spawn_worker: SpawnWorker
) -> None:
    install_audit(db)
    db.execute(MAINTENANCE_LOG)
    old = spawn_worker("chaos=4", app="tests.chaos.audited_app", name="awa_old", settings=LEASE)
    await wait_for(lambda: _async(leader_app(db) == "awa_old"), timeout=30)
    spawn_worker("chaos=4", app="tests.chaos.audited_app", name="awa_new", settings=LEASE)
    ids = [j.id for j in await client.insert_many([{"ms": 50}] * 40, kind="audited",
                                                  queue="chaos")]  # fmt: skip

    await wait_for(lambda: _async(len(_completed(db, ids)) >= 10))
    old.send_signal(signal.SIGSTOP)
    try:
        frozen_at = _now(db)
        # Maintenance goes on without it: the lease expires and the other worker leads.
        due = await client.insert({"ms": 1}, kind="audited", queue="chaos",
                                  run_at=datetime.now(UTC) + timedelta(seconds=1))  # fmt: skip
        await wait_for(lambda: _async(job_state(db, due.id) == "completed"), timeout=30)
        assert leader_app(db) == "awa_new"
        # Jobs fall due all around the moment the old leader wakes up.
        now = datetime.now(UTC)
        soon = [now + timedelta(milliseconds=100 * i) for i in range(30)]
        wake_jobs = [
            await client.insert({"ms": 1}, kind="audited", queue="chaos", run_at=at) for at in soon
        ]
    finally:
        old.send_signal(signal.SIGCONT)
    woke_at = _now(db)
    every = [*ids, due.id, *(j.id for j in wake_jobs)]
    await wait_for(lambda: _async(len(_completed(db, every)) == len(every)), timeout=60)
    # The old leader never took the lease back, and did no maintenance after its freeze.
    assert leader_app(db) == "awa_new"
    stale = db.execute(
        "SELECT job_id, old_state, new_state, at FROM public.frozen_maintenance "
        "WHERE by_app = 'awa_old' AND at > %s",
        (frozen_at,),
    ).fetchall()
    assert stale == []
    by_new = db.execute(
        "SELECT count(*) FROM public.frozen_maintenance WHERE by_app = 'awa_new' AND at > %s",
        (woke_at,),
    ).fetchone()
    assert by_new is not None and by_new[0] > 0  # the wake-up jobs were promoted by the new one
    old.send_signal(signal.SIGTERM)
    assert old.wait(30) == 0
    check_history(db, set(every))


def _completed(db: psycopg.Connection[Any], ids: list[int]) -> list[int]:
    rows = db.execute(
        "SELECT id FROM awa.jobs WHERE id = ANY(%s) AND state = 'completed'", (ids,)
    ).fetchall()
    return [i for (i,) in rows]


def _now(db: psycopg.Connection[Any]) -> datetime:
    row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


async def _async(value: Any) -> Any:
    return value
