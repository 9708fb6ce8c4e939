"""Shared by the chaos tests: an audit of every state change, and a log of executions.

``install_audit`` adds two test-only tables to the test database:

- ``chaos_transitions``: one row per state change of ``awa.jobs``, written by a row
  trigger in the transaction that made it (so a change is logged iff it committed), with
  the row's ``(run_lease, attempted_at)`` after the change;
- ``chaos_exec``: one row per handler execution that finished, written by the handlers
  themselves with the fencing key of their attempt.

``check_history`` then proves the invariants of CONTRACT §7 for a finished run: every
transition is one of docs/job-states.md, every job was executed at least once, none is
left running, and each job reached a final state exactly once, by its current attempt.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.helpers import CHILD_PYTHONPATH, wait_until

FINAL = frozenset({"completed", "failed", "cancelled"})

# The edges of the diagram in docs/job-states.md (CONTRACT §2's states only).
ALLOWED = frozenset(
    {
        ("scheduled", "available"),
        ("retryable", "available"),
        ("available", "running"),
        ("running", "completed"),
        ("running", "retryable"),
        ("running", "scheduled"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("running", "waiting_external"),
        ("waiting_external", "completed"),
        ("waiting_external", "failed"),
        ("waiting_external", "available"),
        ("waiting_external", "retryable"),
        ("waiting_external", "cancelled"),
        ("available", "cancelled"),
        ("scheduled", "cancelled"),
        ("retryable", "cancelled"),
        ("failed", "available"),
        ("cancelled", "available"),
        ("completed", "available"),
    }
)

AUDIT_DDL = """
CREATE TABLE IF NOT EXISTS public.chaos_exec (
    job_id       bigint NOT NULL,
    run_lease    bigint NOT NULL,
    attempted_at timestamptz NOT NULL,
    pid          integer NOT NULL DEFAULT 0,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.chaos_transitions (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       bigint NOT NULL,
    old_state    text NOT NULL,
    new_state    text NOT NULL,
    run_lease    bigint NOT NULL,
    attempted_at timestamptz
);
CREATE OR REPLACE FUNCTION public.chaos_log_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.chaos_transitions (job_id, old_state, new_state, run_lease, attempted_at)
    VALUES (NEW.id, OLD.state::text, NEW.state::text, NEW.run_lease, NEW.attempted_at);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS chaos_log_transition ON awa.jobs;
CREATE TRIGGER chaos_log_transition
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION public.chaos_log_transition();
"""

RECORD_EXECUTION = (
    "INSERT INTO public.chaos_exec (job_id, run_lease, attempted_at, pid) VALUES (%s, %s, %s, %s)"
)


class Recorder:
    """Logs executions in ``chaos_exec`` over its own blocking connection, reconnecting
    when it was killed (the chaos tests terminate backends)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.Connection[Any] | None = None

    def record(self, job: Any, pid: int = 0) -> None:
        """Insert one row, blocking (a handler calls it with no await before it returns,
        so nothing can cancel it in between); retries for ~30 s while the server is down."""
        params = (job.id, job.run_lease, job.attempted_at, pid)
        for attempt in range(300):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self._url, autocommit=True, connect_timeout=5)
                self._conn.execute(RECORD_EXECUTION, params)
                return
            except psycopg.OperationalError:
                self.close()
                if attempt == 299:
                    raise
                time.sleep(0.1)  # the server restarts: wait for it (blocks the loop, too)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def install_audit(conn: psycopg.Connection[Any]) -> None:
    """Create the side tables and the transition trigger (idempotent)."""
    conn.execute(AUDIT_DDL)


def executions(conn: psycopg.Connection[Any]) -> dict[int, list[tuple[int, Any]]]:
    """job id → [(run_lease, attempted_at)] of its finished executions, in order."""
    found: dict[int, list[tuple[int, Any]]] = {}
    rows = conn.execute(
        "SELECT job_id, run_lease, attempted_at FROM public.chaos_exec ORDER BY at"
    ).fetchall()
    for job_id, lease, attempted_at in rows:
        found.setdefault(job_id, []).append((lease, attempted_at))
    return found


def check_history(conn: psycopg.Connection[Any], expected_ids: set[int]) -> dict[str, Any]:
    """Assert the run's invariants; returns a summary for further assertions.

    Meant for runs where finished jobs are not retried by an operator: then every job
    must reach a final state exactly once, and by its latest attempt.
    """
    transitions = conn.execute(
        "SELECT job_id, old_state, new_state, run_lease, attempted_at "
        "FROM public.chaos_transitions ORDER BY seq"
    ).fetchall()
    illegal = [t for t in transitions if (t[1], t[2]) not in ALLOWED]
    assert not illegal, f"transitions outside docs/job-states.md: {illegal[:5]}"
    finals: dict[int, list[tuple[Any, ...]]] = {}
    for t in transitions:
        if t[2] in FINAL:
            finals.setdefault(t[0], []).append(t)
    twice = {job_id: f for job_id, f in finals.items() if len(f) > 1}
    assert not twice, f"jobs finalised more than once: {dict(list(twice.items())[:5])}"
    rows = conn.execute("SELECT id, state::text, run_lease, attempted_at FROM awa.jobs").fetchall()
    state = {r[0]: r for r in rows}
    assert set(state) >= expected_ids, f"jobs lost: {sorted(expected_ids - set(state))[:10]}"
    running = [r for r in rows if r[1] == "running"]
    assert not running, f"jobs left running: {running[:5]}"
    not_final = [r for r in rows if r[0] in expected_ids and r[1] not in FINAL]
    assert not not_final, f"jobs not finished: {not_final[:5]}"
    runs = executions(conn)
    never_ran = sorted(i for i in expected_ids if state[i][1] == "completed" and i not in runs)
    assert not never_ran, f"completed without an execution: {never_ran[:10]}"
    for job_id in expected_ids:
        (final,) = finals[job_id]
        _, _, new_state, lease, attempted_at = final
        # The final change was made under the row's current attempt, never an older one.
        assert (lease, attempted_at) == (state[job_id][2], state[job_id][3]), final
        if new_state == "completed":
            # …and a completion comes from an execution holding exactly that attempt.
            assert (lease, attempted_at) in runs[job_id], (job_id, final, runs[job_id])
    return {"transitions": transitions, "executions": runs, "finals": finals}


ROOT = Path(__file__).resolve().parents[2]
SUPERVISED_APP = "tests.apps.supervised_app:client"


def _default_hangups() -> None:
    """SIGHUP as a terminal leaves it, even when the test suite runs under ``nohup``
    (SIG_IGN is inherited, and a worker keeps ignoring an ignored SIGHUP)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class Supervised:
    """One ``awa worker --processes`` subprocess and the lines it wrote on stderr."""

    def __init__(self, url: str, *args: str, app: str = SUPERVISED_APP, **env: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "awa", "worker", app, *args],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "AWA_DATABASE_URL": url, "PYTHONPATH": CHILD_PYTHONPATH, **env},
            preexec_fn=_default_hangups,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """The first line matching ``pattern`` (waiting for it)."""
        regex = re.compile(pattern)

        def found() -> re.Match[str] | None:
            return next((m for line in list(self.lines) if (m := regex.search(line))), None)

        match: re.Match[str] = wait_until(found, timeout=timeout)
        return match

    def child_pids(self, processes: int) -> dict[int, int]:
        """Process index → pid of the first start of each child."""
        return {
            i: int(self.wait_line(rf"process {i} running \(pid (\d+)\)").group(1))
            for i in range(processes)
        }

    def stop(self, timeout: float = 60, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        status = self.proc.wait(timeout)
        self._close()
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self._close()

    def _close(self) -> None:
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def leader_app(db: psycopg.Connection[Any]) -> str | None:
    """The application_name of the maintenance lease holder's connection (None when no
    lease is live): which process leads."""
    row = db.execute(
        "SELECT a.application_name FROM awa.leader_lease AS l "
        "JOIN pg_stat_activity AS a ON a.pid = l.holder_pid "
        "WHERE l.expires_at > clock_timestamp()"
    ).fetchone()
    return None if row is None else str(row[0])


def job_state(db: psycopg.Connection[Any], job_id: int) -> str:
    """The job's state now."""
    row = db.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])
