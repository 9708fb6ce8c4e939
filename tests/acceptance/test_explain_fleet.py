"""explain across worker processes: it names the process that runs a job, and every
process whose permits are all held, from what those processes published."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

import awa
from awa.types import ReasonCode as C
from tests.acceptance.support import ROOT
from tests.helpers import CHILD_PYTHONPATH, wait_until

Spawn = Callable[[int], subprocess.Popen[str]]


@pytest.fixture
def spawn(database_url: str) -> Iterator[Spawn]:
    """Start ``tests.apps.explain_app`` worker processes; each is stopped at the end."""
    procs: list[subprocess.Popen[str]] = []

    def start(permits: int) -> subprocess.Popen[str]:
        env = {**os.environ, "AWA_DATABASE_URL": database_url, "PYTHONPATH": CHILD_PYTHONPATH}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.apps.explain_app", str(permits)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_running_and_busy_name_the_right_processes(sync_client: awa.Client, spawn: Spawn) -> None:
    first, second = spawn(1), spawn(2)
    held = sync_client.insert_many([{} for _ in range(3)], kind="hold", queue="imports")
    # Each hold job records the pid of the process that runs it.
    pids = wait_until(
        lambda: (
            [m.get("pid") for m in (sync_client.get_job(j.id).metadata for j in held)]
            if all(sync_client.get_job(j.id).metadata.get("pid") for j in held)
            else None
        )
    )
    assert sorted(pids) == sorted([first.pid, second.pid, second.pid])

    for job, pid in zip(held, pids, strict=True):
        found = wait_until(lambda job=job: _listed(sync_client, job.id))
        assert found.reasons[0].code == C.RUNNING
        assert f"on {socket.gethostname()} pid {pid}; last heartbeat" in found.reasons[0].message
        assert found.reasons[0].details["pid"] == pid

    waiting = sync_client.insert({}, kind="hold", queue="imports")
    found = wait_until(lambda: _busy(sync_client, waiting.id))
    message = found.reasons[0].message
    assert "the database counts 3 running jobs of the queue against 3 permits" in message
    assert f"pid {first.pid} holds 1 of 1" in message
    assert f"pid {second.pid} holds 2 of 2" in message
    assert sorted(p["pid"] for p in found.reasons[0].details["processes"]) == sorted(
        [first.pid, second.pid]
    )


def _runners(client: awa.Client, ids: list[int]) -> list[int] | None:
    """The pid each job recorded, once every one of them runs."""
    pids = [client.get_job(i).metadata.get("pid") for i in ids]
    return [int(p) for p in pids] if all(pids) else None


def _listed(client: awa.Client, job_id: int) -> awa.Explanation | None:
    """The explanation once a snapshot lists the job (so ``details`` names its process)."""
    found = client.explain(job_id)
    return found if found.reasons[0].details.get("pid") else None


def _busy(client: awa.Client, job_id: int) -> awa.Explanation | None:
    found = client.explain(job_id)
    message = found.reasons[0].message
    return found if found.reasons[0].code == C.WORKERS_BUSY and "holds 2 of 2" in message else None
