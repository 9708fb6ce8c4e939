"""``awa health --worker`` on this host's workers, from their published rows (no database:
the rows are built here; the processes are real)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime

from awa.cli.commands.health import worker_problems
from awa.types import RuntimeInstance

HOST = socket.gethostname()
NOW = datetime.now(UTC)


def row(pid: int, *, started_at: datetime = NOW, host: str = HOST) -> RuntimeInstance:
    return RuntimeInstance(f"id-{pid}", host, pid, started_at, NOW, False, None)


def _a_dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_a_worker_whose_process_runs_but_stopped_publishing_is_a_problem() -> None:
    """It only dropped out of sight: with another worker healthy, the host read as ready
    while one was frozen (a review: SIGSTOP)."""
    healthy = RuntimeInstance("id-ok", HOST, 1, NOW, NOW, False, None)
    frozen = row(os.getpid())  # this process: alive, and started before that row's start
    problems = worker_problems([healthy], HOST, [frozen])
    assert (
        f"worker pid {os.getpid()}: has published no snapshot in the last minute" in (problems[0])
    )
    assert worker_problems([], HOST, [frozen]) == problems[:1]


def test_silent_rows_of_ended_or_other_processes_are_not_problems() -> None:
    dead = row(_a_dead_pid())
    # The pid is alive, but its process started after that worker did: another process.
    reused = row(os.getpid(), started_at=datetime(2000, 1, 1, tzinfo=UTC))
    elsewhere = row(os.getpid(), host="another-host")
    assert worker_problems([], HOST, [dead, reused, elsewhere]) == [
        f"no awa worker on host {HOST} has published a snapshot in the last minute"
    ]


def test_a_fresh_row_of_a_process_that_is_gone_is_no_worker() -> None:
    """Killed within the last minute, a worker's last row is still fresh: counted, the
    host read as ready with every worker dead, for up to a minute (a review)."""
    killed = row(_a_dead_pid())
    assert worker_problems([killed], HOST) == [
        f"no awa worker on host {HOST} has published a snapshot in the last minute"
    ]
    alive = row(os.getpid())
    assert worker_problems([killed, alive], HOST) == [
        f"worker pid {os.getpid()}: no readable snapshot"
    ]


def test_a_host_clock_ahead_of_the_databases_does_not_read_its_worker_as_gone() -> None:
    """The row's start is the database's time (explain compares it with claims): 5
    minutes behind this host's clock, which /proc's start is on, the pid check read the
    worker as a later process under a reused pid (a review)."""
    from datetime import timedelta

    from awa.cli.commands.health import still_running
    from awa.types import RuntimeSnapshot

    snap = RuntimeSnapshot("id", HOST, os.getpid(), NOW, False, "hard_reserved", None, {})
    database_start = NOW - timedelta(minutes=5)
    instance = RuntimeInstance("id", HOST, os.getpid(), database_start, NOW, False, snap)
    assert still_running(instance)
