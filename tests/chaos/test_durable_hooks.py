"""``completed`` hooks fire once even when a server crash forgets the completion
(issue 18.5, ADR 0017).

A real worker process completes jobs with asynchronous commits on a server of its own.
The server's WAL writer is frozen (SIGSTOP), so those commits stay in its WAL buffers;
once every job shows ``completed`` the WAL writer is killed (SIGKILL), which makes the
postmaster reset and recover the server — a crash that forgets every completion (and
claim) not written yet. Those jobs run again. Each job's ``completed`` hook must still
have fired exactly once: before the fix it fired at the forgotten commit and again at
the second one.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

import awa
from awa.embedded import EmbeddedPostgres
from tests.chaos.conftest import ROOT
from tests.helpers import CHILD_PYTHONPATH, wait_until

pytestmark = pytest.mark.chaos

JOBS = 30


def _completed(url: str) -> int:
    try:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'completed'").fetchone()
    except psycopg.OperationalError:  # recovering
        return -1
    return int(row[0]) if row else 0


def _walwriter(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _ids(path: Path) -> collections.Counter[int]:
    return collections.Counter(int(line) for line in path.read_text().split())


def test_completed_hooks_fire_once_across_a_server_crash(tmp_path: Path) -> None:
    # Not under tmp_path: pytest resets its base directory to mode 0700 whenever another
    # session starts, which locks out the server's own user (when run as root).
    data = Path(tempfile.mkdtemp(prefix="awa-durable-"))
    # Every commit asynchronous, the leader's lease renewals too (a synchronous commit by
    # anyone would flush the whole WAL, the completions with it).
    server = EmbeddedPostgres(
        data / "pgdata", settings={"fsync": "off", "synchronous_commit": "off"}
    )
    url = server.start()
    hooks, runs = tmp_path / "hooks.log", tmp_path / "runs.log"
    hooks.touch()
    runs.touch()
    worker: subprocess.Popen[str] | None = None
    try:
        with awa.Client(url) as client:
            client.migrate()
            jobs = client.insert_many([{}] * JOBS, kind="noted", queue="dh")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")  # the jobs themselves survive the crash
        walwriter = _walwriter(url)
        os.kill(walwriter, signal.SIGSTOP)  # asynchronous commits stay in WAL buffers
        env = {**os.environ, "AWA_DATABASE_URL": url, "PYTHONPATH": CHILD_PYTHONPATH,
               "AWA_TEST_HOOK_LOG": str(hooks), "AWA_TEST_RUN_LOG": str(runs)}  # fmt: skip
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.apps.hooks_app", "dh=8"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        wait_until(lambda: _completed(url) == JOBS, timeout=60)
        os.kill(walwriter, signal.SIGKILL)  # the server crashes and recovers

        # Forgotten claims and completions: those jobs run again and complete again.
        wait_until(lambda: any(n > 1 for n in _ids(runs).values()), timeout=120)
        wait_until(lambda: _completed(url) == JOBS, timeout=120)
        worker.send_signal(signal.SIGTERM)  # shutdown makes the last outcomes durable
        assert worker.wait(60) == 0
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(10)
        if worker is not None and worker.stdout is not None:
            worker.stdout.close()
        server.destroy()
        shutil.rmtree(data, ignore_errors=True)
    fired, ran = _ids(hooks), _ids(runs)
    twice = {
        job.id: f"{fired[job.id]} hooks, {ran[job.id]} runs" for job in jobs if fired[job.id] != 1
    }
    assert not twice, f"hooks not fired exactly once: {twice}"  # the worker's log is above
