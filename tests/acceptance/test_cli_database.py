"""Which database the ``awa`` command talks to: ``--database-url`` before or after the
command, the environment, and the embedded default in ``./.awa/pgdata``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import awa
from awa import bridge, embedded
from tests.acceptance.support import ROOT, Result, cli_env
from tests.helpers import wait_until

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nothing"


def _awa(*args: str, cwd: Path = ROOT, timeout: float = 120, **env: str) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "awa", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def test_database_url_after_the_command_wins(database_url: str) -> None:
    """The README says every command takes ``--database-url``: after the command name
    too, where it overrides one given before it and the environment."""
    result = _awa("--database-url", UNREACHABLE, "queue", "stats", "--json",
                  "--database-url", database_url, AWA_DATABASE_URL=UNREACHABLE)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.json() == []
    result = _awa("job", "list", "--database-url", database_url, "--json")
    assert result.returncode == 0 and result.json() == [], result.stderr


def test_no_url_falls_back_to_an_embedded_server_in_the_working_directory(
    tmp_path: Path,
) -> None:
    """No flag and no environment: the CLI starts (initialising on first use) an embedded
    server with its data in ./.awa/pgdata and says so in exactly one line on stderr; the
    next command finds it running and uses the same data."""
    data_dir = tmp_path / ".awa" / "pgdata"
    notice = "awa: using the embedded PostgreSQL in ./.awa/pgdata"
    try:
        first = _awa("migrate", cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert first.stderr.splitlines() == [notice]
        assert (data_dir / "PG_VERSION").is_file()
        pause = _awa("queue", "pause", "fallback", cwd=tmp_path)
        assert pause.returncode == 0, pause.stderr
        assert pause.stderr.splitlines() == [notice]
        stats = _awa("queue", "list", "--json", cwd=tmp_path)
        assert stats.stderr.splitlines() == [notice]
        assert [q["queue"] for q in stats.json() if q["paused"]] == ["fallback"]
        _a_worker_falls_back_too(tmp_path, notice)
    finally:
        if data_dir.exists():
            embedded.stop(data_dir)


@pytest.mark.parametrize("variable", ["AWA_DATABASE_URL", "DATABASE_URL"])
def test_an_environment_url_means_no_embedded_server(tmp_path: Path, variable: str) -> None:
    result = _awa("queue", "stats", cwd=tmp_path, **{variable: UNREACHABLE})
    assert result.returncode == 1 and "cannot connect" in result.stderr
    assert not (tmp_path / ".awa").exists()


def _a_worker_falls_back_too(cwd: Path, notice: str) -> None:
    """``awa worker`` with an application client built without a URL: the same server
    (it once failed, "no database URL", blamed on MODULE:CLIENT)."""
    url = embedded.start(cwd / ".awa" / "pgdata")  # already running: its URL
    with psycopg.connect(url, autocommit=True) as db:
        job = bridge.insert_job(db, {}, kind="cli_echo", queue="cli")
        assert isinstance(job, awa.Job)
        proc = subprocess.Popen(
            [sys.executable, "-m", "awa", "worker", "tests.acceptance.cli_app:client",
             "--queue", "cli=1"],
            cwd=cwd, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:

            def completed() -> bool:
                row = db.execute("SELECT state FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
                return row == ("completed",)

            wait_until(completed, timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert stderr.splitlines()[0] == notice


REFUSED_WITHOUT_A_DATABASE = [
    (["dlq", "purge"], "--all"),
    (["dlq", "retry"], "--all"),
    (["dlq", "move"], "--all"),
    (["batch", "apply", "move-queue", "--to", "slow"], "--all"),
    (["batch", "preview", "move-queue"], "--to"),
    (["job", "retry-failed"], "--kind"),
    (["queue", "limits", "set", "q"], "limits set"),
    (["queue", "limits", "set", "q", "--burst", "3"], "--burst"),
    (["queue", "overrides", "set", "q"], "overrides set"),
    (["pool", "set", "--total", "5", "--queue", "a:min=9"], "--queue"),
    (["pool", "set", "--total", "5", "--queue", "a", "--queue", "a"], "--queue"),
    (["job", "enqueue", "--kind", "k", "--file", "/nonexistent"], "--file"),
]


@pytest.mark.parametrize(("argv", "named"), REFUSED_WITHOUT_A_DATABASE, ids=" ".join)
def test_input_refused_without_a_database_starts_no_embedded_server(
    tmp_path: Path, argv: list[str], named: str
) -> None:
    """Bad input is one line on stderr, before any database is looked for: with no URL
    configured, these once started the embedded server (and said so) before refusing."""
    result = _awa(*argv, cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"awa: error: {'argument ' if named.startswith('--') else ''}{named}")
    assert not (tmp_path / ".awa").exists()


def test_a_worker_whose_client_has_a_bad_url_of_its_own_starts_no_embedded_server(
    tmp_path: Path,
) -> None:
    """The embedded fallback is for a client with no URL at all, not one with a malformed
    URL of its own (it once started the server, then failed on that URL)."""
    (tmp_path / "badapp.py").write_text(
        'import awa\nclient = awa.AsyncClient("host=db port=notaport dbname")\n'
    )
    result = _awa("worker", "badapp:client", "--queue", "q=1", cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("awa: error: argument MODULE:CLIENT: database_url: ")
    assert not (tmp_path / ".awa").exists()
