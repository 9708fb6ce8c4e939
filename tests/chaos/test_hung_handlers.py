"""Handlers that hang past their deadline do not wedge their queue, and a queue that
cannot make progress is reported unhealthy (issue 18.2, ADR 0016).

A real worker process (``tests.apps.hung_app``: 2 permits, 1 s deadline) gets two jobs
whose plain ``def`` handlers block for good, then 20 fast ones. The hung handlers are
abandoned a few seconds past their deadline, so the fast jobs run. When the hung jobs
come back and hang again, the worker has already abandoned as many handlers as it has
permits: they stay stuck on both permits, and ``awa health --worker`` says so.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg

import awa
from tests.chaos.conftest import ROOT, SpawnWorker
from tests.helpers import wait_until


def _health(database_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "awa", "--database-url", database_url, "health", "--worker"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _completed(db: psycopg.Connection[Any], kind: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM awa.jobs WHERE kind = %s AND state = 'completed'", [kind]
    ).fetchone()
    return row[0] if row else 0


def test_hung_handlers_are_abandoned_and_a_wedged_queue_is_reported(
    database_url: str, db: psycopg.Connection[Any], spawn_worker: SpawnWorker
) -> None:
    with awa.Client(database_url) as client:
        hung = client.insert_many([{}, {}], kind="hung", queue="hung")
        client.insert_many([{}] * 20, kind="fast", queue="hung")
    spawn_worker(app="tests.apps.hung_app")

    # Before: both permits stayed with the hung threads and no fast job ever ran.
    wait_until(lambda: _completed(db, "fast") == 20, timeout=60)
    attempts = db.execute(
        "SELECT attempt FROM awa.jobs WHERE id = ANY(%s)", [[j.id for j in hung]]
    ).fetchall()
    assert all(attempt >= 1 for (attempt,) in attempts)

    def wedged() -> str | None:
        result = _health(database_url)
        return result.stdout if result.returncode == 1 else None

    # The hung jobs return and hang again; two handlers are abandoned already (the
    # limit): the new ones keep both permits, and the worker says it cannot go on.
    reason = wait_until(wedged, timeout=90, interval=0.5)
    assert "queue hung cannot make progress (2 handler(s) asked to stop" in reason
