"""Chaos helpers: worker subprocesses that can be killed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SpawnWorker = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn_worker(database_url: str) -> Iterator[SpawnWorker]:
    """Start worker processes (``tests.apps.worker_app`` unless ``app=`` names another
    module); each is killed at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def spawn(*queues: str, app: str = "tests.apps.worker_app") -> subprocess.Popen[str]:
        env = {**os.environ, "AWA_DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", app, *queues],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"worker did not start: {line!r}"
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
