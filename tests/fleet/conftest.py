"""Fleet tests: several real worker processes against one server, judged from what ran."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CHILD_PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    """One execution recorded by ``tests.apps.fleet_app``."""

    id: int
    queue: str
    tenant: str | None
    start: float
    end: float
    attempted_at: float
    pid: int
    ordering_key: str | None = None


class Fleet:
    """Worker processes of ``tests.apps.fleet_app`` sharing one execution log."""

    def __init__(self, database_url: str, log: Path) -> None:
        self._url = database_url
        self.log = log
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, count: int, *queues: str, **settings: Any) -> None:
        """Start ``count`` processes serving ``queues`` ("name=N"); wait until all run."""
        env = {
            **os.environ,
            "AWA_DATABASE_URL": self._url,
            "PYTHONPATH": CHILD_PYTHONPATH,
            "AWA_FLEET_LOG": str(self.log),
            "AWA_FLEET_SETTINGS": json.dumps(settings),
        }
        started = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.apps.fleet_app", *queues],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        self.procs.extend(started)
        for proc in started:  # started together, so they contend from the first claim
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"fleet worker did not start: {line!r}"

    def runs(self) -> list[Run]:
        """Every execution recorded so far."""
        if not self.log.exists():
            return []
        # The processes append while we read: a last line without its newline is still
        # being written, and is read next time.
        complete = self.log.read_text().rpartition("\n")[0]
        return [Run(**json.loads(line)) for line in complete.splitlines() if line]

    def stop(self) -> None:
        """SIGTERM every process and wait for a graceful exit."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()
        self.procs.clear()


@pytest.fixture
def fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(database_url, tmp_path / "runs.jsonl")
    yield f
    for proc in f.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at t comes before a start at t)."""
    events = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    open_now = peak = 0
    for _, step in events:
        open_now += step
        peak = max(peak, open_now)
    return peak


def most_in_window(times: list[float], window: float) -> int:
    """The most ``times`` inside any closed window of ``window`` seconds."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, t in enumerate(ordered):
        while t - ordered[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most
