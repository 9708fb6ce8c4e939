"""The ``awa`` command line, driven as ``python -m awa`` subprocesses on a real database.

Every command's happy path and ``--json`` shape, bad input (exit 2, one stderr line that
names the flag, nothing written), and the long-running ``worker`` and ``serve``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import signal
import socket
import subprocess
import sys
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import awa
from awa.cli.main import build_parser
from tests.acceptance.conftest import Awa
from tests.acceptance.support import ROOT, cli_env, db_state, http, start_serve, stop_serve
from tests.helpers import wait_until

SETTINGS = ["poll_interval_ms", "claim_batch_size", "rate_limit", "deadline_ms"]


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Any]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(path, parser)]
    return [leaf for s in subs for name, child in s.choices.items()
            for leaf in _leaves(child, (*path, name))]  # fmt: skip


def test_every_command_has_an_example_in_its_help() -> None:
    leaves = _leaves(build_parser())
    names = {" ".join(path) for path, _ in leaves}
    assert {"queue overrides set", "queue overrides clear", "queue overrides show",
            "runtime list", "serve"} <= names  # fmt: skip
    for path, parser in leaves:
        text = parser.format_help()
        assert "example:" in text and "awa " in text.split("example:")[1], path
        assert "--json" in text, path


def test_help_runs_as_a_subprocess(awa_cli: Awa) -> None:
    result = awa_cli("queue", "overrides", "set", "--help")
    assert result.returncode == 0
    assert "whole-state" in result.stdout and "refresh cadence" in result.stdout
    assert "example:" in result.stdout


# -- migrate, health ------------------------------------------------------------------


def test_migrate_and_health(awa_cli: Awa, empty_database_url: str) -> None:
    before = awa_cli("health", "--json", url=empty_database_url)
    assert before.returncode == 1 and before.json()["ready"] is False
    sql = awa_cli("migrate", "--sql", url=empty_database_url)  # all of it, for an empty one
    assert sql.returncode == 0 and "CREATE TABLE" in sql.stdout
    as_json = awa_cli("migrate", "--sql", "--json", url=empty_database_url)
    assert as_json.json() == {"sql": sql.stdout}  # one JSON document, not the SQL itself
    applied = awa_cli("migrate", "--json", url=empty_database_url)
    assert applied.returncode == 0
    versions = applied.json()["applied"]
    assert versions[0] == 1 and versions == sorted(versions)
    again = awa_cli("migrate", url=empty_database_url)
    assert again.returncode == 0 and "up to date" in again.stdout
    health = awa_cli("health", "--json", url=empty_database_url)
    assert health.returncode == 0
    assert health.json() == {"ready": True, "postgres_connected": True,
                             "schema_current": True, "reason": "ok"}  # fmt: skip
    sql = awa_cli("migrate", "--sql", url=empty_database_url)  # nothing is pending now
    assert sql.returncode == 0 and "nothing to apply" in sql.stdout


def test_health_reports_an_unreachable_database(awa_cli: Awa) -> None:
    """It raised "cannot connect" instead of reporting it (a review)."""
    down = awa_cli("health", "--json", url="postgresql://nobody@127.0.0.1:1/nothing")
    assert down.returncode == 1
    report = down.json()
    assert report["ready"] is False and report["postgres_connected"] is False
    assert "cannot connect" in report["reason"]


def test_health_is_bounded_when_the_database_does_not_answer(awa_cli: Awa) -> None:
    """A server that accepts connections but never answers (frozen, partitioned) made
    `awa health` wait libpq's connect timeout twice, about 20 s, past any probe's own
    timeout (a review); the probe as a whole is now bounded."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        down = awa_cli("health", "--json", url=f"postgresql://nobody@127.0.0.1:{port}/nothing")
    assert down.returncode == 1
    report = down.json()
    assert report["postgres_connected"] is False
    assert report["reason"] == "the database did not answer in 5 s"


# -- queues and jobs ------------------------------------------------------------------


def test_queue_commands(awa_cli: Awa, sync_client: awa.Client, database_url: str) -> None:
    sync_client.insert_many([{"n": i} for i in range(3)], kind="k", queue="mail")
    stats = awa_cli("queue", "stats", "--json")
    assert stats.returncode == 0
    [row] = stats.json()
    assert row["queue"] == "mail" and row["available"] == 3 and row["paused"] is False
    assert set(row) >= {"scheduled", "running", "failed", "completed_last_hour", "lag_seconds"}
    assert awa_cli("queue", "stats").returncode == 0

    paused = awa_cli("queue", "pause", "mail", "--by", "alice")
    assert paused.returncode == 0 and "paused mail" in paused.stdout
    with psycopg.connect(database_url) as conn:
        row2 = conn.execute(
            "SELECT paused, paused_by FROM awa.queue_meta WHERE queue = 'mail'"
        ).fetchone()
    assert row2 == (True, "alice")
    assert awa_cli("queue", "list", "--json").json() == [{"queue": "mail", "paused": True}]
    resumed = awa_cli("queue", "resume", "mail", "--json")
    assert resumed.returncode == 0 and resumed.json() == {"queue": "mail", "paused": False}
    assert awa_cli("queue", "list", "--json").json() == [{"queue": "mail", "paused": False}]

    drained = awa_cli("queue", "drain", "mail")
    assert drained.returncode == 0 and "3 job(s) cancelled" in drained.stdout
    again = awa_cli("queue", "drain", "mail", "--json")
    assert again.json() == {"queue": "mail", "cancelled": 0}


def test_job_commands(awa_cli: Awa, sync_client: awa.Client) -> None:
    job = sync_client.insert({"to": "ada"}, kind="send", queue="mail")
    listed = awa_cli("job", "list", "--queue", "mail", "--json")
    assert listed.returncode == 0
    [entry] = listed.json()
    assert entry["id"] == job.id and entry["args"] == {"to": "ada"}
    assert entry["state"] == "available"
    assert set(entry) >= {"kind", "queue", "attempt", "max_attempts", "errors", "run_at"}
    assert awa_cli("job", "list", "--state", "failed", "--json").json() == []

    got = awa_cli("job", "get", str(job.id), "--json").json()
    assert got["id"] == job.id and got["kind"] == "send"
    shown = awa_cli("job", "get", str(job.id))
    assert shown.returncode == 0
    assert '{"to": "ada"}' in shown.stdout  # args as JSON in the table, not a Python repr
    dumped = awa_cli("job", "dump", str(job.id))
    assert dumped.returncode == 0 and dumped.json()["id"] == job.id

    cancelled = awa_cli("job", "cancel", str(job.id), "--json")
    assert cancelled.returncode == 0 and cancelled.json()["state"] == "cancelled"
    retried = awa_cli("job", "retry", str(job.id), "--json")
    assert retried.returncode == 0 and retried.json()["state"] == "available"
    assert retried.stderr_lines == []
    again = awa_cli("job", "retry", str(job.id))  # available already: says it changed nothing
    assert again.returncode == 0
    assert again.stderr_lines == [f"nothing to retry: job {job.id} is available"]

    missing = awa_cli("job", "get", "999999")
    assert missing.returncode == 1 and len(missing.stderr_lines) == 1


def test_job_commands_show_args_however_deep(awa_cli: Awa, sync_client: awa.Client) -> None:
    args: dict[str, object] = {"leaf": 1}
    for _ in range(600):  # a RecursionError at 500 once; stored by SQL, past insert's 256
        args = {"a": args}
    job = sync_client.insert({}, kind="deep", queue="mail")
    with psycopg.connect(sync_client.database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET args = %s WHERE id = %s", (Jsonb(args), job.id))
    got = awa_cli("job", "get", str(job.id), "--json")
    assert got.returncode == 0, got.stderr
    assert got.json()["args"] == args
    assert awa_cli("job", "get", str(job.id)).returncode == 0
    [entry] = awa_cli("job", "list", "--kind", "deep", "--json").json()
    assert entry["id"] == job.id and entry["args"] == args


def test_terminal_controls_in_a_jobs_text_are_shown_escaped(
    awa_cli: Awa, sync_client: awa.Client
) -> None:
    """A job's error, args and tags are anyone's text: printed raw, an escape sequence in
    an error message retitled or repainted the operator's terminal, and a bidirectional
    control showed "exe.png" for "gnp.exe" (a review found the bidi case in the
    dashboard)."""
    job = sync_client.insert({"note": "\x9b2J"}, kind="k", queue="mail", tags=["a\u202eb"])
    error = {"attempt": 1, "at": "2026-01-01T00:00:00Z", "type": "E",
             "error": "\x1b]0;pwned\x07 \u202egnp.exe\nline two"}  # fmt: skip
    with psycopg.connect(sync_client.database_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET errors = %s WHERE id = %s", (Jsonb([error]), job.id))
    for args in (("job", "get", str(job.id)), ("job", "list", "--queue", "mail")):
        out = awa_cli(*args).stdout
        assert not any(c in out for c in "\x1b\x07\x9b\u202e"), (args, out)
    shown = awa_cli("job", "get", str(job.id)).stdout
    assert "\\x1b]0;pwned\\x07 \\u202egnp.exe\\x0aline two" in shown
    assert "a\\u202eb" in shown and "\\x9b2J" in shown
    as_json = awa_cli("job", "get", str(job.id), "--json").json()
    assert as_json["errors"][0]["error"] == error["error"]  # kept, escaped by the encoder


# -- runtime overrides ----------------------------------------------------------------


def test_overrides_set_show_clear(awa_cli: Awa, sync_client: awa.Client) -> None:
    result = awa_cli(
        "queue", "overrides", "set", "email", "--poll-interval-ms", "500",
        "--rate-limit", "2.5", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = result.json()
    assert body["queue"] == "email"
    stored = body["stored"]
    assert {k: stored[k] for k in SETTINGS} == {
        "poll_interval_ms": 500, "claim_batch_size": None, "rate_limit": 2.5, "deadline_ms": None
    }  # fmt: skip
    assert stored["updated_at"]
    assert "refresh cadence" in result.stderr  # the note about when workers apply it
    overrides = sync_client.queue_runtime_overrides("email")
    assert overrides is not None and overrides.poll_interval_ms == 500

    # Whole-state: a second set without --rate-limit reverts the rate.
    assert awa_cli("queue", "overrides", "set", "email", "--claim-batch-size", "7").returncode == 0
    overrides = sync_client.queue_runtime_overrides("email")
    assert overrides is not None
    assert (overrides.poll_interval_ms, overrides.claim_batch_size, overrides.rate_limit) == (
        None, 7, None,
    )  # fmt: skip

    shown = awa_cli("queue", "overrides", "show", "email", "--json").json()
    assert shown["queue"] == "email" and shown["stored"]["claim_batch_size"] == 7
    assert shown["workers"] == []
    everything = awa_cli("queue", "overrides", "show", "--json").json()
    assert [e["queue"] for e in everything] == ["email"]
    table = awa_cli("queue", "overrides", "show")
    assert table.returncode == 0 and "email" in table.stdout

    cleared = awa_cli("queue", "overrides", "clear", "email", "--json")
    assert cleared.returncode == 0
    assert all(cleared.json()["stored"][k] is None for k in SETTINGS)
    # Not paused, no DLQ flag: the cleared row held nothing else and went with the clear.
    assert sync_client.queue_runtime_overrides("email") is None


def test_overrides_show_reports_effective_values_of_live_workers(
    awa_cli: Awa, live_worker: awa.Client
) -> None:
    # "reports" runs with a deadline: an override of 0 would cross the zero boundary.
    live_worker.set_runtime_overrides("reports", deadline_ms=0, claim_batch_size=3)
    live_worker.set_runtime_overrides("email", poll_interval_ms=400)

    def applied() -> dict[str, Any] | None:
        [instance] = live_worker.list_runtime_instances()
        assert instance.snapshot is not None
        reports = instance.snapshot.queues["reports"]
        email = instance.snapshot.queues["email"]
        done = reports.effective["claim_batch_size"] == 3 and "deadline_ms" in reports.ignored
        return email.effective if done and email.effective["poll_interval_ms"] == 400 else None

    wait_until(applied)
    shown = awa_cli("queue", "overrides", "show", "reports", "--json").json()
    [worker] = shown["workers"]
    assert worker["effective"]["claim_batch_size"] == 3
    assert worker["configured"]["claim_batch_size"] == 512
    assert worker["overrides"]["deadline_ms"] == 0
    assert worker["effective"]["deadline_ms"] == worker["configured"]["deadline_ms"] > 0
    assert worker["ignored"]["deadline_ms"]  # a reason, in words
    assert set(worker) == {"instance_id", "hostname", "pid", "configured", "overrides",
                           "effective", "ignored"}  # fmt: skip
    everything = awa_cli("queue", "overrides", "show", "--json").json()
    assert [e["queue"] for e in everything] == ["email", "reports"]
    table = awa_cli("queue", "overrides", "show")
    assert table.returncode == 0 and "ignored because" in table.stdout


# -- runtime --------------------------------------------------------------------------


def test_runtime_list(awa_cli: Awa, live_worker: awa.Client) -> None:
    # The only worker becomes the leader, and publishes it.
    wait_until(lambda: [i.is_leader for i in live_worker.list_runtime_instances()] == [True])
    [instance] = awa_cli("runtime", "list", "--json").json()
    assert instance["mode"] == "weighted" and instance["global_max_workers"] == 6
    assert instance["is_leader"] is True
    assert set(instance) == {"instance_id", "hostname", "pid", "is_leader", "started_at",
                             "last_seen_at", "seen_ago_s", "mode", "global_max_workers",
                             "queues"}  # fmt: skip
    assert 0 <= instance["seen_ago_s"] < 60  # by the database's clock
    email = instance["queues"]["email"]
    assert email["capacity"] == {"mode": "weighted", "min_workers": 2, "weight": 2,
                                 "overflow_held": 0}  # fmt: skip
    assert email["in_flight"] == 0 and email["paused"] is False
    table = awa_cli("runtime", "list")
    assert table.returncode == 0 and "weighted" in table.stdout and "email" in table.stdout


def test_runtime_list_without_workers(awa_cli: Awa) -> None:
    assert awa_cli("runtime", "list", "--json").json() == []
    result = awa_cli("runtime", "list")
    assert result.returncode == 0 and "no live workers" in result.stdout


def test_worker_runs_jobs_and_stops_on_sigterm(
    database_url: str, sync_client: awa.Client, awa_cli: Awa
) -> None:
    ok = sync_client.insert({}, kind="cli_echo", queue="cli")
    bad = sync_client.insert({}, kind="cli_fail", queue="cli")
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa", "--database-url", database_url, "worker",
         "tests.acceptance.cli_app:client", "--queue", "cli=2"],
        cwd=ROOT, env=cli_env(),  # the database only from --database-url
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: sync_client.get_job(bad.id).state == awa.JobState.FAILED)
        assert sync_client.get_job(ok.id).state == awa.JobState.COMPLETED
        [instance] = wait_until(lambda: awa_cli("runtime", "list", "--json").json())
        assert instance["pid"] == proc.pid
        assert instance["queues"]["cli"]["capacity"] == {"mode": "hard_reserved", "max_workers": 2}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert awa_cli("runtime", "list", "--json").json() == []  # it unregistered itself


def test_worker_exits_when_the_application_closes_its_client(
    database_url: str, sync_client: awa.Client
) -> None:
    """It stayed up with no worker, health "shutting down", until signalled."""
    job = sync_client.insert({}, kind="cli_close", queue="cli")
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa", "--database-url", database_url, "worker",
         "tests.acceptance.cli_app:client", "--queue", "cli=2"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert "the worker stopped without being asked" in stderr
    assert sync_client.get_job(job.id).state == awa.JobState.COMPLETED


# -- bad input ------------------------------------------------------------------------

BAD_INPUT = [
    (["queue", "overrides", "set", "email", "--poll-interval-ms", "0"], "--poll-interval-ms"),
    (["queue", "overrides", "set", "email", "--poll-interval-ms", "9999999999"],
     "--poll-interval-ms"),
    (["queue", "overrides", "set", "email", "--claim-batch-size", "abc"], "--claim-batch-size"),
    (["queue", "overrides", "set", "email", "--rate-limit", "-1"], "--rate-limit"),
    (["queue", "overrides", "set", "email", "--rate-limit", "nan"], "--rate-limit"),
    (["queue", "overrides", "set", "email", "--rate-limit", "inf"], "--rate-limit"),
    (["queue", "overrides", "set", "email", "--deadline-ms", "-5"], "--deadline-ms"),
    (["queue", "overrides", "set", "email"], "--poll-interval-ms"),
    (["queue", "overrides", "set", "", "--rate-limit", "1"], "QUEUE"),
    (["queue", "overrides", "bogus", "email"], "ACTION"),
    (["queue", "pause"], "QUEUE"),
    (["job", "get", "0"], "ID"),
    (["job", "list", "--limit", "0"], "--limit"),
    (["job", "list", "--state", "nope"], "--state"),
    (["runtime", "list", "--fresh-ms", "0"], "--fresh-ms"),
    (["serve", "--port", "70000"], "--port"),
    (["serve", "--host", "0.0.0.0"], "--host"),
    (["serve", "--token", ""], "--token"),
    (["serve", "--refresh-ms", "0"], "--refresh-ms"),
    (["serve", "--public-url", "ftp://dash.example.com"], "--public-url"),
    (["serve", "--public-url", "https://dash.example.com/awa"], "--public-url"),
    (["serve", "--public-url", "https://dash.example.com:99999"], "--public-url"),
    (["serve", "--forwarded-allow-ips", "nginx.local"], "--forwarded-allow-ips"),
    (["serve", "--forwarded-allow-ips", ","], "--forwarded-allow-ips"),
]  # fmt: skip


def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    awa_cli: Awa, sync_client: awa.Client, database_url: str
) -> None:
    sync_client.insert({"n": 1}, kind="k", queue="email")
    sync_client.set_runtime_overrides("email", poll_interval_ms=300)
    before = db_state(database_url)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores
        results = list(pool.map(lambda case: awa_cli(*case[0]), BAD_INPUT))
    for (args, flag), result in zip(BAD_INPUT, results, strict=True):
        case = " ".join(args)
        assert result.returncode == 2, (case, result.stdout, result.stderr)
        assert len(result.stderr_lines) == 1, (case, result.stderr)
        assert flag in result.stderr_lines[0], (case, result.stderr)
        assert result.stdout == "", case
    assert db_state(database_url) == before


# -- serve ----------------------------------------------------------------------------


def test_serve_starts_on_loopback_and_answers(database_url: str) -> None:
    proc, base = start_serve(database_url)
    try:
        assert base.startswith("http://127.0.0.1:")
        assert http(base + "healthz") == (200, '{"ok":true}')
        status, body = http(base)
        assert status == 200 and "Queues" in body
    finally:
        stop_serve(proc)


def test_serve_with_a_token_from_the_environment(database_url: str) -> None:
    # (The tests bind loopback only; `--host 0.0.0.0` without a token is refused above.)
    proc, base = start_serve(database_url, "--read-only", AWA_DASHBOARD_TOKEN="s3cret")
    try:
        assert http(base)[0] == 401
        assert http(base, headers={"Authorization": "Bearer wrong"})[0] == 401
        status, body = http(base, headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and "read-only" in body
    finally:
        stop_serve(proc)


def test_demo_runs_to_completion(awa_cli: Awa) -> None:
    result = awa_cli("demo", "--jobs", "20", timeout=50)
    assert result.returncode == 0, result.stderr
    assert "done: 60 jobs" in result.stdout
    assert "awa: demo on database " in result.stderr  # a configured URL, not the embedded one
    summary = awa_cli("demo", "--jobs", "3", "--json", timeout=50)
    assert summary.returncode == 0, summary.stderr
    assert summary.json()["jobs"] == 9  # the live table went to stderr


def test_a_second_demo_on_the_same_database_is_refused(awa_cli: Awa, database_url: str) -> None:
    from awa.cli.commands.demo import DEMO_LOCK_KEY

    with psycopg.connect(database_url, autocommit=True) as running:  # as a demo holds it
        running.execute("SELECT pg_advisory_lock(%s)", (DEMO_LOCK_KEY,))
        second = awa_cli("demo", "--jobs", "3", timeout=50)
    assert second.returncode == 1
    assert second.stderr.strip() == (
        "awa: error: another awa demo is running on this database: wait for it to end"
    )
