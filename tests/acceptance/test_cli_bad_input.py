"""More bad input for the ``awa`` command line (tests/acceptance/test_cli.py has the first
19 cases): every command group, malformed database URLs, unknown ids and schedules.

A bad value exits 2, an unknown id or schedule (or an unreachable server) exits 1; either
way with exactly one line on stderr that names the flag or the problem, nothing on
stdout, no traceback, and every table of the ``awa`` schema unchanged.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from tests.acceptance.conftest import Awa
from tests.acceptance.support import ROOT, Result, cli_env
from tests.helpers import wait_until
from tests.integration.test_bad_input import awa_snapshot, seed

LONG = "x" * 201

BAD_VALUES = [
    (["job", "get", "abc"], "ID"),
    (["job", "cancel"], "ID"),
    (["job", "list", "--limit", "abc"], "--limit"),
    (["job", "list", "--limit", "10001"], "--limit"),
    (["job", "list", "--state", ""], "--state"),
    (["job", "list", "--queue", ""], "queue"),
    (["job", "list", "--kind", LONG], "kind"),
    (["queue", "pause", LONG], "argument QUEUE"),
    (["queue", "pause", ""], "argument QUEUE"),
    (["queue", "pause", "q", "--by", ""], "argument --by"),
    (["queue", "drain", ""], "argument QUEUE"),
    (["queue", "pause", "q\udcff"], "argument QUEUE"),  # the byte 0xff, as the shell's $'q\xff'
    (["queue", "pause", "q", "--by", "ops\udcff"], "argument --by"),
    (["queue", "overrides", "set", "q", "--rate-limit", "1e-300"], "--rate-limit"),
    (["queue", "overrides", "set", "q", "--rate-limit", "1e308"], "--rate-limit"),
    (["queue", "overrides", "set", "q", "--claim-batch-size", "2147483648"],
     "--claim-batch-size"),
    (["queue", "overrides", "set", "q", "--deadline-ms", "abc"], "--deadline-ms"),
    (["queue", "overrides", "show", ""], "argument QUEUE"),
    (["queue", "overrides", "clear", ""], "argument QUEUE"),
    (["queue", "overrides", "set", "", "--weight", "2"], "argument QUEUE"),
    (["pool", "set", "--total", "5", "--queue", LONG], "argument --queue"),
    (["pool", "set", "--total", "5", "--queue", "a,weight=2"], "argument --queue"),
    (["pool", "set", "--total", "5", "--queue", "a:min=1,min=2"], "argument --queue"),
    (["pool", "set", "--total", "2", "--queue", "a:min=3"], "exceeds the pool total (2)"),
    (["pool", "set", "--total", "5", "--queue", "a:min=1", "--queue", "a:min=1"], "named twice"),
    (["cron", "pause", ""], "argument NAME"),
    (["dlq", "list", "--older-than", "5x"], "--older-than"),
    (["dlq", "list", "--older-than", "99999999999999999999d"], "--older-than"),
    (["dlq", "list", "--limit", "0"], "--limit"),
    (["dlq", "retry"], "filter"),
    (["dlq", "purge"], "filter"),
    (["dlq", "purge", "0"], "ID"),
    (["dlq", "retry", "99999999999999999999999"], "argument ID"),  # past bigint
    (["dlq", "get", "99999999999999999999999"], "argument ID"),
    (["job", "get", "99999999999999999999999"], "argument ID"),  # past bigint: malformed
    (["job", "cancel", "9223372036854775808"], "argument ID"),
    (["job", "explain", "99999999999999999999999"], "argument ID"),
    (["dlq", "list", "--before", "2026-01-01T00:00:00+00:00|99999999999999999999999"],
     "argument --before"),
    (["batch", "preview", "move-queue", "--to", "x", "--id", "99999999999999999999999"],
     "argument --id"),
    (["dlq", "purge", "--older-than", "9" * 400 + "d"], "argument --older-than"),
    # The other operation's flag was ignored without a word.
    (["batch", "apply", "move-queue", "--to", "x", "--priority", "1", "--kind", "k"],
     "argument --priority"),
    (["batch", "preview", "set-priority", "--priority", "1", "--to", "x"], "argument --to"),
    (["demo", "--jobs", "99999999999"], "argument --jobs"),  # built in memory: an OOM kill
    (["dlq", "purge", "--kind", ""], "kind"),
    (["worker", "no_such_module_xyz:client"], "MODULE:CLIENT"),
    (["worker", "tests.apps.worker_app"], "MODULE:CLIENT"),
    (["worker", "tests.apps.worker_app:nothing_here"], "MODULE:CLIENT"),
    (["worker", "x:y", "--queue", "q=0"], "--queue"),
    (["worker", "x:y", "--processes", "99999999999999999999"], "--processes"),  # was 1 GB
    (["worker", "x:y", "--processes", "1025"], "--processes"),
    (["worker", "x:y", "--max-connections", "100000000000000"], "--max-connections"),
    (["worker", "x:y", "--queue", "bad:max=2"], "argument --queue"),
    (["worker", "tests.apps.worker_app:client", "--queue", "bad"], "argument --queue"),
    (["worker", "tests.apps.worker_app:client", "--queue", "w:min=1,weight=2"],
     "argument --queue"),
    (["worker", "tests.apps.worker_app:client", "--global-max-workers", "4", "--queue", "w=2"],
     "argument --queue"),
    (["worker", "tests.apps.worker_app:client", "--global-max-workers", "4", "--queue",
      "w:min=5"], "argument --global-max-workers"),
    (["worker", "x:y", "--global-max-workers", "0"], "--global-max-workers"),
    (["worker", "tests.apps.worker_app:client", "--metrics-port", "70000"], "--metrics-port"),
    (["worker", "tests.apps.worker_app:client", "--metrics-port", "0", "--metrics-host",
      "no-such-host.invalid"], "argument --metrics-host"),  # was blamed on the port
    (["worker", "tests.apps.worker_app:client", "--metrics-port", "0", "--metrics-host",
      "no-such-host.invalid", "--processes", "2"], "argument --metrics-host"),
    (["worker", "tests.apps.worker_app:client", "--queue", "w=2", "--queue", "w=3"],
     "argument --queue"),
    (["worker", "tests.apps.worker_app:client", "--queue", "w=2", "--queue", "w=3",
      "--processes", "2"], "argument --queue"),  # refused once, before any child starts
    (["worker", "tests.apps.worker_app:client", "--queue", f"{LONG}=2"], "argument --queue"),
    (["worker", "x:y", "--log-level", "loud"], "argument --log-level"),
    (["worker", "x:y", "--log-format", "xml"], "argument --log-format"),
    (["worker", "x:y", "--set", "heartbeat_interval_ms"], "argument --set"),
    (["worker", "x:y", "--set", "no_such_setting=1"], "argument --set"),
    (["worker", "x:y", "--set", "heartbeat_interval_ms=soon"], "argument --set"),
    (["worker", "x:y", "--set", "synchronous_commit=maybe"], "argument --set"),
    (["worker", "tests.apps.worker_app:client", "--set", "heartbeat_interval_ms=0"],
     "argument --set: heartbeat_interval_ms"),
    (["worker", "tests.apps.worker_app:client", "--set", "heartbeat_interval_ms=100000"],
     "argument --set: heartbeat_staleness_ms"),  # the default staleness no longer exceeds it
    (["worker", "tests.apps.worker_app:client", "--set", "poll_interval_ms=3000000000"],
     "argument --set: poll_interval_ms"),  # was the queues' bound, blamed on no flag
    (["worker", "tests.apps.worker_app:client", "--set", "handoff_seats=-1", "--processes",
      "2"], "argument --set: handoff_seats"),  # refused once, before any child starts
    (["runtime", "list", "--fresh-ms", "abc"], "--fresh-ms"),
    (["demo", "--jobs", "0"], "--jobs"),
    (["serve", "--port", "abc"], "--port"),
    (["frobnicate"], "COMMAND"),
    (["migrate", "--bogus"], "--bogus"),
]  # fmt: skip

NOT_FOUND = [
    (["job", "get", "999999"], "not found"),
    (["job", "cancel", "999999"], "not found"),
    (["job", "retry", "999999"], "not found"),
    (["job", "dump", "999999"], "not found"),
    (["cron", "pause", "nope"], "nope"),
    (["cron", "resume", "nope"], "nope"),
    (["cron", "trigger", "nope"], "nope"),
    (["cron", "remove", "nope"], "nope"),
]

BAD_URLS = [
    ("not a url", 2, "--database-url"),
    ("http://example.com/db", 2, "--database-url"),
    ("postgresql://[::1", 2, "--database-url"),
    ("postgresql://localhost/db?bogus_option=1", 2, "--database-url"),
    ("   ", 2, "--database-url"),
    ("postgresql://127.0.0.1:notaport/app", 2, "--database-url"),  # libpq checks at connect
    ("postgresql://ada:s3cret-pw@127.0.0.1:1/app", 1, "cannot connect"),
]


def _check(result: Result, status: int, names: str, case: str) -> None:
    lines = result.stderr_lines
    assert result.returncode == status, (case, result.returncode, result.stdout, lines)
    assert len(lines) == 1, (case, lines)
    assert names in lines[0], (case, lines)
    assert "Traceback" not in result.stderr, case
    assert result.stdout == "", (case, result.stdout)


@pytest.mark.timeout(300)  # ~60 CLI processes, two at a time: slow on a loaded machine
def test_bad_values_exit_2_and_unknown_names_exit_1_with_one_line(
    awa_cli: Awa, database_url: str
) -> None:
    seed(database_url)
    before = awa_snapshot(database_url)
    cases = [(args, 2, names) for args, names in BAD_VALUES]
    cases += [(args, 1, names) for args, names in NOT_FOUND]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores
        results = list(pool.map(lambda case: awa_cli(*case[0]), cases))
    for (args, status, names), result in zip(cases, results, strict=True):
        _check(result, status, names, " ".join(args))
    assert awa_snapshot(database_url) == before


def test_a_blank_database_url_is_refused_not_ignored(awa_cli: Awa) -> None:
    for args in (["--database-url", "", "queue", "list"], ["queue", "list", "--database-url", ""]):
        _check(awa_cli(*args), 2, "argument --database-url", " ".join(args))


def test_a_worker_whose_client_has_its_own_url_refuses_another(awa_cli: Awa) -> None:
    result = awa_cli("worker", "tests.apps.own_url_app:client")
    _check(result, 2, "argument --database-url", "worker with a URL of its own")


def test_malformed_or_unreachable_database_urls(awa_cli: Awa) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda case: awa_cli("queue", "list", url=case[0]), BAD_URLS))
    for (url, status, names), result in zip(BAD_URLS, results, strict=True):
        _check(result, status, names, url)
        assert "s3cret-pw" not in result.stderr  # a password is never echoed


def test_a_reader_that_leaves_early_gets_no_traceback(database_url: str) -> None:
    # `awa queue list | head -0`: the pipe's reader is gone before awa writes.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "awa", "--database-url", database_url, "queue", "list"],
            cwd=ROOT, env=cli_env(), stdout=write_end, stderr=subprocess.PIPE, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == ""


def test_a_bad_url_from_the_environment_is_named_by_its_variable() -> None:
    """It was blamed on `--database-url`, a flag nobody gave."""
    cases = [("AWA_DATABASE_URL", ["queue", "list"]), ("DATABASE_URL", ["queue", "list"]),
             ("AWA_DATABASE_URL", ["migrate", "--sql"]),
             # the client read it: named as the variable (it was blamed on the module)
             ("AWA_DATABASE_URL", ["worker", "tests.acceptance.cli_app:client"])]  # fmt: skip
    for variable, command in cases:
        ran = subprocess.run(
            [sys.executable, "-m", "awa", *command], cwd=ROOT,
            env={**cli_env(AWA_DATABASE_URL=""), variable: "garbage url"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        result = Result(ran.returncode, ran.stdout, ran.stderr)
        _check(result, 2, f"{variable}: not a PostgreSQL URL", variable)


def test_a_worker_whose_client_has_its_own_url_ignores_another_apps_database_url() -> None:
    """An application whose own database is MySQL keeps DATABASE_URL for it; awa's client
    has a URL of its own and never reads it, so the worker must not refuse to start over
    it (a review found a first fix validating it up front)."""
    ran = subprocess.run(
        [sys.executable, "-m", "awa", "worker", "tests.apps.own_url_app:client"], cwd=ROOT,
        env={**cli_env(AWA_DATABASE_URL=""), "DATABASE_URL": "mysql://app:pw@mysql.internal/app"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stderr  # its own URL's server is not there: exit 1
    assert "DATABASE_URL" not in ran.stderr and "cannot connect" in ran.stderr
    typo = subprocess.run(  # its own URL malformed: the module is blamed, not the variable
        [sys.executable, "-m", "awa", "worker", "tests.apps.bad_url_app:client"], cwd=ROOT,
        env={**cli_env(AWA_DATABASE_URL=""), "DATABASE_URL": "mysql://app:pw@mysql.internal/app"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert typo.returncode == 2
    assert "argument MODULE:CLIENT: database_url:" in typo.stderr, typo.stderr


@pytest.mark.parametrize("closed", [(0,), (1,), (2,), (0, 1, 2)], ids=["in", "out", "err", "all"])
def test_a_command_started_with_a_standard_stream_closed_runs(
    database_url: str, closed: tuple[int, ...]
) -> None:
    """Started with stdin, stdout or stderr closed (``>&-``, some service managers), a
    command failed with a traceback, or uvloop aborted (SIGABRT) when it closed the socket
    that had taken the free descriptor (a review of deployments)."""
    ran = subprocess.run(
        [sys.executable, "-m", "awa", "--database-url", database_url, "queue", "list"],
        cwd=ROOT, env=cli_env(), preexec_fn=lambda: [os.close(fd) for fd in closed],
        timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0


@pytest.mark.parametrize("supervised", [False, True], ids=["worker", "supervisor"])
def test_a_sigterm_during_the_applications_import_stops_the_worker_before_it_starts(
    database_url: str, tmp_path: Any, supervised: bool
) -> None:
    """PID 1 of a container drops a signal it has no handler for: a SIGTERM sent while
    the application's module was importing was lost, and the worker then started and
    claimed jobs until it was killed (a review of deployments). SIGTERM is now held from
    the start and honoured once the import is done: nothing starts, exit 0."""
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO awa.jobs (kind, queue) VALUES ('cli_echo', 'cli')")
    marker, go = tmp_path / "importing", tmp_path / "go"
    more = ["--processes", "2"] if supervised else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa", "--database-url", database_url, "worker",
         "tests.apps.stopped_during_import_app:client", *more],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
        env=cli_env(AWA_TEST_IMPORT_MARKER=str(marker), AWA_TEST_IMPORT_GO=str(go)),
    )  # fmt: skip
    try:
        wait_until(marker.exists, timeout=30)
        proc.send_signal(signal.SIGTERM)
        go.touch()
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "SIGTERM before the worker started: exiting" in stderr
    with psycopg.connect(database_url) as db:
        assert db.execute("SELECT state::text, attempt FROM awa.jobs").fetchall() == [
            ("available", 0)
        ]
