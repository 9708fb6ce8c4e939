"""A worker frozen between a claim and its handler does not start the handler once the
job has been rescued and run elsewhere (issue 18.4).

Three real worker processes on one server: L leads maintenance (it serves another
queue), F claims the job and is then frozen — its loop blocked right after the claim
returned, before the handler launched, then SIGSTOPped — and G, started while F is
frozen, runs the job after L rescued it. F is resumed: its claim waited far longer than
half the staleness window, so it re-checks it against the database before starting the
handler, finds the job is no longer its own, and does not start it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa
from tests.chaos.conftest import ROOT
from tests.chaos.support import job_state
from tests.helpers import CHILD_PYTHONPATH, wait_until


class Proc:
    """A ``tests.apps.frozen_app`` process logging to a file."""

    def __init__(self, database_url: str, log: Path, *args: str, **env: str) -> None:
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.apps.frozen_app", *args],
            cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "AWA_DATABASE_URL": database_url, "PYTHONPATH": CHILD_PYTHONPATH,
                 **env},
        )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self._out.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.close()


def _leader_pid(db: psycopg.Connection[Any]) -> int | None:
    row = db.execute("SELECT pid FROM awa.runtime_instances WHERE is_leader").fetchone()
    return row[0] if row else None


def _starts(db: psycopg.Connection[Any], job_id: int) -> list[int]:
    """The pids of the processes that started the job's handler."""
    rows = db.execute(
        "SELECT pid FROM frozen_exec WHERE job_id = %s ORDER BY run_lease", [job_id]
    ).fetchall()
    return [pid for (pid,) in rows]


def test_a_resumed_worker_does_not_start_handlers_for_stale_claims(
    database_url: str, db: psycopg.Connection[Any], procs: list[Proc], tmp_path: Path
) -> None:
    db.execute("CREATE TABLE frozen_exec (job_id bigint, run_lease bigint, pid int)")
    leader = Proc(database_url, tmp_path / "leader.log", "idle=1")
    procs.append(leader)
    wait_until(lambda: _leader_pid(db) == leader.proc.pid, timeout=30)

    with awa.Client(database_url) as client:
        job = client.insert({}, kind="victim", queue="fz")
    freeze = tmp_path / "thaw"
    frozen = Proc(database_url, tmp_path / "frozen.log", "fz=1",
                  AWA_TEST_FREEZE_FILE=str(freeze))  # fmt: skip
    procs.append(frozen)
    wait_until(lambda: "frozen" in frozen.output(), timeout=30)  # claimed, not launched
    assert job_state(db, job.id) == "running"
    frozen.proc.send_signal(signal.SIGSTOP)

    # Its heartbeat stops; the leader rescues the job and another worker runs it.
    other = Proc(database_url, tmp_path / "other.log", "fz=1")
    procs.append(other)
    wait_until(lambda: job_state(db, job.id) == "completed", timeout=60)
    assert _starts(db, job.id) == [other.proc.pid]

    freeze.touch()
    frozen.proc.send_signal(signal.SIGCONT)
    # F now either starts the handler of its stale claim (the bug) or declines to.
    try:
        wait_until(
            lambda: "handler not started" in frozen.output() or len(_starts(db, job.id)) > 1,
            timeout=60,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the frozen worker's log:\n{frozen.output()}") from None
    assert _starts(db, job.id) == [other.proc.pid], frozen.output()
    assert f"job {job.id} (victim, attempt 1): handler not started" in frozen.output()
    assert job_state(db, job.id) == "completed"
