"""``awa job explain ID [--json]`` as a user runs it: a headline, then the reasons."""

from __future__ import annotations

import awa
from tests.acceptance.conftest import Awa


def test_explain_prints_a_headline_then_numbered_reasons(
    awa_cli: Awa, live_worker: awa.Client
) -> None:
    live_worker.pause_queue("archive", paused_by="alice")
    job = live_worker.insert({"path": "/srv/a"}, kind="archive", queue="archive")
    result = awa_cli("job", "explain", str(job.id), COLUMNS="80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Job {job.id} (archive) has waited ")
    assert "queue 'archive' is paused by alice." in result.stdout.replace("\n", " ")
    assert lines[lines.index(" 1. queue_paused") + 1].startswith("    Queue 'archive' is paused")
    assert " 2. no_live_worker" in lines
    assert "serves 'email' and 'reports'." in result.stdout.replace("\n    ", " ")
    assert max(len(line) for line in lines) <= 80


def test_explain_json_has_the_job_reasons_and_summary(
    awa_cli: Awa, live_worker: awa.Client
) -> None:
    job = live_worker.insert({}, kind="archive", queue="archive")
    result = awa_cli("job", "explain", str(job.id), "--json")
    assert result.returncode == 0, result.stderr
    data = result.json()
    assert data["job"]["id"] == job.id and data["job"]["state"] == "available"
    assert [r["code"] for r in data["reasons"]] == ["no_live_worker"]
    assert data["reasons"][0]["details"]["live_processes"][0]["queues"] == ["email", "reports"]
    assert data["summary"].startswith(f"Job {job.id} (archive) has waited ")


def test_explain_unknown_and_malformed_ids(awa_cli: Awa) -> None:
    missing = awa_cli("job", "explain", "999999")
    assert missing.returncode == 1
    assert missing.stderr_lines == ["awa: error: job 999999 not found"]
    malformed = awa_cli("job", "explain", "abc")
    assert malformed.returncode == 2 and len(malformed.stderr_lines) == 1
    assert "ID" in malformed.stderr_lines[0]
