"""Shared by the acceptance and browser tests: subprocess environment, results, DB state."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.helpers import CHILD_PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]
# Fast snapshots and override refreshes so effective values show up within a test.
LIVE_SETTINGS = {"runtime_snapshot_interval_ms": 100, "override_refresh_ms": 100}


@dataclass
class Result:
    """What one ``awa`` invocation did."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess: no ambient database or dashboard token."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AWA_DATABASE_URL", "DATABASE_URL", "AWA_DASHBOARD_TOKEN")}  # fmt: skip
    env["PYTHONPATH"] = CHILD_PYTHONPATH
    env.update(extra)
    return env


def db_state(url: str) -> tuple[Any, ...]:
    """Everything a command could change: the control rows and the jobs."""
    with psycopg.connect(url, autocommit=True) as conn:
        meta = conn.execute("SELECT * FROM awa.queue_meta ORDER BY queue").fetchall()
        jobs = conn.execute(
            "SELECT id, state, attempt, run_at, finalized_at FROM awa.jobs ORDER BY id"
        ).fetchall()
    return tuple(meta), tuple(jobs)


def start_serve(url: str, *args: str, **env: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``awa serve --port 0 ARGS`` and return it with its base URL (``http://…/``)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa", "--database-url", url, "serve", "--port", "0", *args],
        cwd=ROOT, env=cli_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the server prints its URL once it listens
    match = re.search(r"(http://\S+/)", line)
    if match is None:
        proc.kill()
        proc.communicate(timeout=30)
        raise AssertionError(f"awa serve did not start: {line!r}")
    return proc, match.group(1)


def stop_serve(proc: subprocess.Popen[str]) -> str:
    """Stop a server started by :func:`start_serve`; returns what it wrote on stderr."""
    proc.terminate()
    _, stderr = proc.communicate(timeout=30)
    return stderr


def http_response(
    url: str,
    *,
    data: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, dict[str, str]]:
    """GET (or POST a form when ``data`` is given), following no redirect:
    (status, body, lower-cased headers)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            got = {k.lower(): v for k, v in response.headers.items()}
            return response.status, response.read().decode(), got
    except urllib.error.HTTPError as exc:
        got = {k.lower(): v for k, v in exc.headers.items()}
        return exc.code, exc.read().decode(), got


def http(
    url: str,
    *,
    data: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    """(status, body) of :func:`http_response`."""
    status, body, _ = http_response(url, data=data, headers=headers)
    return status, body
