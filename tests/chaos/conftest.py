"""Chaos helpers: worker subprocesses that can be killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import conninfo

from tests.helpers import CHILD_PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]

SpawnWorker = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn_worker(database_url: str) -> Iterator[SpawnWorker]:
    """Start worker processes (``tests.apps.worker_app`` unless ``app=`` names another
    module); each is killed at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def spawn(
        *queues: str,
        app: str = "tests.apps.worker_app",
        name: str | None = None,
        settings: dict[str, Any] | None = None,
        url: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """``name`` becomes the connections' ``application_name`` (to tell in the database
        which process did what); ``settings`` override the app's worker settings; ``url``
        replaces the test database's (a proxy's, say); ``env`` is added to its environment."""
        url = url or database_url
        if name is not None:
            url = conninfo.make_conninfo(url, application_name=name)
        env = {**os.environ, "AWA_DATABASE_URL": url, "PYTHONPATH": CHILD_PYTHONPATH,
               "AWA_TEST_WORKER_SETTINGS": json.dumps(settings or {}), **(env or {})}  # fmt: skip
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
