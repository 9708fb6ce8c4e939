"""A worker whose handlers cannot be stopped still exits (issue 18.1).

Real ``awa worker`` processes with a plain ``def`` handler in ``time.sleep(1e6)`` and an
async handler that swallows ``CancelledError``: shutdown ends within its timeout plus a
bounded grace, names the abandoned jobs and leaves none of them running; a second
signal exits at once. The bounds the tests wait are generous: they tell "exits" from
"hangs forever", not fast from slow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa
from awa.cli.stop_signals import REPEAT_WINDOW_S
from tests.helpers import CHILD_PYTHONPATH, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXIT_WAIT_S = 60  # far beyond timeout + grace; before the fix the process never exits


class Worker:
    """An ``awa worker`` subprocess whose stderr is collected line by line."""

    def __init__(self, database_url: str, *args: str, nohup: bool = False) -> None:
        env = {**os.environ, "AWA_DATABASE_URL": database_url, "PYTHONPATH": CHILD_PYTHONPATH}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "awa", "worker", "tests.apps.stuck_app:client",
             "--queue", "stuck=4", *args],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=_ignore_hangups if nohup else _default_hangups,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self) -> int:
        try:
            code = self.proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit; its stderr:\n{self.stderr}")
        self._reader.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


def _ignore_hangups() -> None:
    """What ``nohup`` does before it runs the command."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _default_hangups() -> None:
    """Not under ``nohup`` even when the test suite is (SIG_IGN is inherited)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture
def workers(database_url: str) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.close()


def _started(db: psycopg.Connection[Any], *ids: int) -> bool:
    rows = db.execute(
        "SELECT count(*) FROM awa.jobs WHERE id = ANY(%s) AND state = 'running' "
        "AND progress IS NOT NULL",
        [list(ids)],
    ).fetchone()
    return rows is not None and rows[0] == len(ids)


def _one_job_running(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker], kind: str, *args: str
) -> tuple[Worker, int]:
    """A worker started with ``args``, running one job of ``kind``; and that job's id."""
    with awa.Client(database_url) as client:
        job_id = client.insert({}, kind=kind, queue="stuck").id
    worker = Worker(database_url, *args)
    workers.append(worker)
    wait_until(lambda: _started(db, job_id), timeout=30)
    return worker, job_id


def test_shutdown_abandons_handlers_that_cannot_be_stopped_and_exits(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    with awa.Client(database_url) as client:
        blocked = client.insert({}, kind="stuck_sync", queue="stuck")
        swallower = client.insert({}, kind="stuck_async", queue="stuck")
    worker = Worker(database_url, "--shutdown-timeout-ms", "1000")
    workers.append(worker)
    wait_until(lambda: _started(db, blocked.id, swallower.id), timeout=30)

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.stderr
    assert "abandoned 2 handler(s)" in worker.stderr
    assert f"job {blocked.id} (stuck_sync, attempt 1)" in worker.stderr
    assert f"job {swallower.id} (stuck_async, attempt 1)" in worker.stderr
    states = db.execute(
        "SELECT id, state, errors -> -1 ->> 'error' FROM awa.jobs ORDER BY id"
    ).fetchall()
    assert states == [
        (blocked.id, "retryable", "worker shut down before the handler finished"),
        (swallower.id, "retryable", "worker shut down before the handler finished"),
    ]
    assert db.execute("SELECT count(*) FROM awa.runtime_instances").fetchone() == (0,)


@pytest.mark.parametrize(
    ("kind", "second"), [("stuck_sync", signal.SIGINT), ("blocks_loop", signal.SIGTERM)]
)
def test_a_second_signal_exits_at_once(
    kind: str,
    second: signal.Signals,
    database_url: str,
    db: psycopg.Connection[Any],
    workers: list[Worker],
) -> None:
    """Also while an ``async def`` blocks the event loop: the signals were the loop's, and
    neither was even acknowledged until the blocking call returned (a review: never, for
    one that blocks for good)."""
    # A shutdown timeout far longer than the test waits: only the second signal ends it.
    worker, _ = _one_job_running(
        database_url, db, workers, kind, "--shutdown-timeout-ms", "3600000"
    )

    worker.signal(signal.SIGTERM)
    sent = time.monotonic()
    wait_until(lambda: "a second signal exits at once" in worker.stderr, timeout=30)
    # A SIGTERM this close to the first is its copy (one event sends some twice): the
    # second comes once the window has passed.
    wait_until(lambda: time.monotonic() - sent > REPEAT_WINDOW_S, timeout=5)
    worker.signal(second)
    assert worker.wait_exit() == 128 + second.value, worker.stderr
    assert f"{second.name} again: exiting now" in worker.stderr
    # Not fenced (no time was given for it): the rescuer returns it once its heartbeat
    # is stale, as after a crash.
    assert db.execute("SELECT state FROM awa.jobs").fetchone() == ("running",)


def test_threads_left_by_handlers_do_not_hold_the_exit(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    """A cancelled ``asyncio.to_thread`` call keeps its thread, and the interpreter
    waited for it (and for a handler's own non-daemon thread) at exit: a SIGTERMed worker
    stayed up as long as the blocking call, its jobs already fenced."""
    with awa.Client(database_url) as client:
        in_thread = client.insert({}, kind="stuck_in_thread", queue="stuck")
        own = client.insert({}, kind="own_thread", queue="stuck")
    worker = Worker(database_url, "--shutdown-timeout-ms", "1000")
    workers.append(worker)
    wait_until(lambda: _started(db, in_thread.id), timeout=30)
    wait_until(
        lambda: (
            db.execute("SELECT state FROM awa.jobs WHERE id = %s", [own.id]).fetchone()
            == ("completed",)
        ),
        timeout=30,
    )

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.stderr
    assert "thread(s) started while the command ran still run" in worker.stderr
    assert "handler-own" in worker.stderr
    assert db.execute("SELECT state FROM awa.jobs WHERE id = %s", [in_thread.id]).fetchone() == (
        "retryable",
    )


PROMOTE_DUE_RETRIES = """
WITH due AS (
    SELECT id FROM awa.jobs WHERE state = 'retryable' AND run_at <= now() FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE awa.jobs AS j SET state = 'available' FROM due WHERE j.id = due.id RETURNING j.queue
)
SELECT pg_notify('awa_available', queue) FROM promoted
"""


def test_a_job_whose_handler_still_runs_is_not_retried_elsewhere_before_the_exit(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    """The shutdown fenced an abandoned handler's job back to retryable at once, and
    another worker ran it while the first process's thread still ran it, for the ~3 s
    until that process exited (a review: every deploy with long plain-def jobs). The
    fenced job now waits for that process to be gone; a job whose handler stopped when
    cancelled is released at once. What ran when is read from the handlers' own beats."""
    db.execute("CREATE TABLE beats (job_id bigint, attempt int, pid int, at timestamptz)")
    with awa.Client(database_url) as client:
        beating = client.insert({}, kind="beating_sync", queue="stuck")
        stopping = client.insert({}, kind="stops_async", queue="stuck")
        # A plain def's task ends at once; its thread when the handler sees it must stop.
        stopping_sync = client.insert({}, kind="stops_sync", queue="stuck")
        # Its swallowed cancellations keep the first process up ~3 s after the fence.
        swallower = client.insert({}, kind="stuck_async", queue="stuck")
    first = Worker(database_url, "--shutdown-timeout-ms", "500")
    workers.append(first)
    wait_until(
        lambda: _started(db, beating.id, stopping.id, stopping_sync.id, swallower.id), timeout=30
    )
    second = Worker(database_url)
    workers.append(second)
    wait_until(lambda: "worker running" in second.stderr, timeout=30)

    first.signal(signal.SIGTERM)
    while first.proc.poll() is None:  # a leader elsewhere promoting due retries at once
        db.execute(PROMOTE_DUE_RETRIES)
    assert first.wait_exit() == 0, first.stderr
    held, released, released_sync = (
        db.execute("SELECT run_at FROM awa.jobs WHERE id = %s", [job.id]).fetchone()
        for job in (beating, stopping, stopping_sync)
    )
    assert held is not None and released is not None and released_sync is not None
    assert released[0] < held[0] and released_sync[0] < held[0]
    wait_until(
        lambda: (
            db.execute(
                "SELECT count(*) FROM awa.jobs WHERE state = 'completed' AND id = ANY(%s)",
                [[beating.id, stopping.id, stopping_sync.id]],
            ).fetchone()
            == (3,)
        ),
        timeout=60,
    )
    row = db.execute(
        "SELECT max(at) FILTER (WHERE attempt = 1), min(at) FILTER (WHERE attempt = 2), "
        "count(DISTINCT pid) FROM beats WHERE job_id = %s",
        [beating.id],
    ).fetchone()
    assert row is not None
    last_beat_of_first, first_beat_of_retry, processes = row
    assert processes == 2
    assert first_beat_of_retry > last_beat_of_first


def test_a_hangup_stops_the_worker_as_sigterm_does_unless_ignored_by_nohup(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    """SIGHUP (its terminal closed) killed the worker on the spot, its jobs left running
    until their heartbeats went stale (a review). Under ``nohup`` it stays ignored."""
    worker = Worker(database_url)
    workers.append(worker)
    wait_until(lambda: "worker running" in worker.stderr, timeout=30)
    worker.signal(signal.SIGHUP)
    assert worker.wait_exit() == 0, worker.stderr
    assert "SIGHUP: shutting down" in worker.stderr

    kept = Worker(database_url, nohup=True)
    workers.append(kept)
    wait_until(lambda: "worker running" in kept.stderr, timeout=30)
    kept.signal(signal.SIGHUP)  # ignored, so the SIGTERM after it is the first stop signal
    kept.signal(signal.SIGTERM)
    assert kept.wait_exit() == 0, kept.stderr
    assert "SIGTERM: shutting down" in kept.stderr and "SIGHUP" not in kept.stderr


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_copy_of_the_first_stop_signal_is_the_same_stop(
    sig: signal.Signals, database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    """A closed terminal sends a foreground worker SIGHUP twice (from its shell and from
    the kernel), ``timeout`` sends SIGTERM twice: the copy exited at once, its handler
    killed mid-job and its job left running for the rescuer (a review: two runs in three).
    The job here finishes within the shutdown timeout."""
    worker, job_id = _one_job_running(
        database_url, db, workers, "sleeps_2s", "--shutdown-timeout-ms", "60000"
    )
    worker.signal(sig)
    wait_until(lambda: f"{sig.name}: shutting down" in worker.stderr, timeout=30)
    worker.signal(sig)  # the copy, taken apart from the first (never merged with it)
    assert worker.wait_exit() == 0, worker.stderr
    assert f"{sig.name} again within 1 s: the same stop" in worker.stderr
    row = db.execute("SELECT state FROM awa.jobs WHERE id = %s", [job_id]).fetchone()
    assert row == ("completed",)


def test_a_second_signal_while_the_exit_waits_for_leftovers_still_exits_at_once(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    """After the shutdown, the exit gives tasks that ignore their cancellation a grace:
    a signal then went to the handler held for the application's import, which said
    "before the worker started" and exited 0 (a review of the interpreter-level handlers)."""
    worker, _ = _one_job_running(
        database_url, db, workers, "stuck_async", "--shutdown-timeout-ms", "200"
    )
    worker.signal(signal.SIGTERM)
    sent = time.monotonic()
    wait_until(lambda: "abandoned 1 handler(s)" in worker.stderr, timeout=30)
    wait_until(lambda: time.monotonic() - sent > REPEAT_WINDOW_S, timeout=5)  # not a copy
    worker.signal(signal.SIGTERM)
    code = worker.wait_exit()
    # 143 from the handler; -15 when the signal came after the loop closed (at once too).
    assert code in (128 + signal.SIGTERM.value, -signal.SIGTERM.value), worker.stderr
    assert "before the worker started" not in worker.stderr


def test_a_plain_def_that_stops_when_asked_is_released_at_once(
    database_url: str, db: psycopg.Connection[Any], workers: list[Worker]
) -> None:
    """A plain def's task ends at its cancellation, its thread only when the handler sees
    job.is_cancelled(): the shutdown counted the thread as abandoned and held its job for
    11 s (a review of the hold). Its thread is waited for within the abandon wait."""
    worker, job_id = _one_job_running(
        database_url, db, workers, "stops_sync", "--shutdown-timeout-ms", "200"
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.stderr
    assert "abandoned" not in worker.stderr
    row = db.execute("SELECT state, run_at <= now() FROM awa.jobs WHERE id = %s", [job_id])
    assert row.fetchone() == ("retryable", True)
