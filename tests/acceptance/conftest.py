"""Acceptance fixtures: run ``python -m awa`` as a subprocess; run a live worker in-process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import awa
from tests.acceptance.support import LIVE_SETTINGS, ROOT, Result, cli_env
from tests.helpers import wait_until

Awa = Callable[..., Result]


@pytest.fixture
def awa_cli(database_url: str) -> Awa:
    """Run ``python -m awa --database-url URL ARGS...`` and return its result."""

    def run(*args: str, url: str | None = None, timeout: float = 60, **env: str) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "awa", "--database-url", url or database_url, *args],
            cwd=ROOT,
            env=cli_env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def live_worker(database_url: str) -> Iterator[awa.Client]:
    """A worker in this process: ``email`` weighted (min 2, weight 2, rate limited) and
    ``reports`` weighted (min 1), 6 permits in all; waits until it is published."""
    client = awa.Client(database_url)

    @client.task(None, kind="noop", queue="email")
    def noop(job: awa.Job[Any]) -> None:
        return None

    client.start(
        [
            awa.QueueConfig("email", min_workers=2, weight=2, rate_limit=(50, 0)),
            awa.QueueConfig("reports", min_workers=1, weight=1),
        ],
        global_max_workers=6,
        **LIVE_SETTINGS,
    )
    try:
        wait_until(lambda: client.list_runtime_instances())
        yield client
    finally:
        client.shutdown()
        client.close()
