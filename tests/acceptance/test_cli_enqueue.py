"""``awa job enqueue``: a JSON-lines file becomes jobs, all or nothing."""

from __future__ import annotations

from pathlib import Path

import awa
from tests.acceptance.conftest import Awa


def test_every_line_becomes_a_job(awa_cli: Awa, sync_client: awa.Client, tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"to": "a@x"}\n\n{"to": "b@x", "n": 2}\n')
    result = awa_cli("job", "enqueue", "--kind", "send_email", "--queue", "email",
                     "--priority", "1", "--file", str(source), "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.json() == {"inserted": 2, "kind": "send_email", "queue": "email"}
    jobs = sync_client.list_jobs(kind="send_email")
    assert sorted(job.args["to"] for job in jobs) == ["a@x", "b@x"]
    assert {(job.queue, job.priority) for job in jobs} == {("email", 1)}


def test_a_bad_file_writes_nothing(awa_cli: Awa, sync_client: awa.Client, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ok": 1}\n{"oops": \n')
    not_object = tmp_path / "list.jsonl"
    not_object.write_text('{"ok": 1}\n[1, 2]\n')
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"ok": 1}\n{"a": NaN}\n')
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"a": 1e400}\n')
    nul = tmp_path / "nul.jsonl"  # JSON, but nothing PostgreSQL can store: named by line too
    nul.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3}\n{"a": "x\\u0000y"}\n')
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"a": 1}\n{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    for path, reason in ((bad, "line 2 is not JSON"), (not_object, "line 2 is not a JSON object"),
                         (tmp_path / "missing.jsonl", "cannot read"),
                         (nan, "line 2 is not JSON"), (huge, "line 1 is not JSON"),
                         (nul, "line 5: args: contains a NUL"),
                         (deep, "line 2 is nested too deeply")):  # fmt: skip
        result = awa_cli("job", "enqueue", "--kind", "k", "--file", str(path))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (path, result.stderr)
        assert "--file" in lines[0] and reason in lines[0]
    assert sync_client.list_jobs() == []


def test_an_ordering_key_puts_the_file_in_one_line(
    awa_cli: Awa, sync_client: awa.Client, tmp_path: Path
) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text('{"step": 1}\n{"step": 2}\n')
    result = awa_cli("job", "enqueue", "--kind", "migrate", "--ordering-key", "tenant-4",
                     "--file", str(source))  # fmt: skip
    assert result.returncode == 0, result.stderr
    jobs = sorted(sync_client.list_jobs(kind="migrate"), key=lambda job: job.id)
    assert [(job.args["step"], job.ordering_key) for job in jobs] == [
        (1, "tenant-4"),
        (2, "tenant-4"),
    ]
    shown = awa_cli("job", "get", str(jobs[0].id))
    assert "ordering_key" in shown.stdout and "tenant-4" in shown.stdout
    for bad in ("", "x" * 256):
        refused = awa_cli("job", "enqueue", "--kind", "k", "--ordering-key", bad,
                          "--file", str(source))  # fmt: skip
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert "--ordering-key" in lines[0]
    assert len(sync_client.list_jobs()) == 2


def test_lines_end_at_newlines_only_and_the_kind_is_checked_for_an_empty_file(
    awa_cli: Awa, sync_client: awa.Client, tmp_path: Path
) -> None:
    source = tmp_path / "separators.jsonl"
    source.write_text('{"s": "a\u2028b"}\n{"s": "c\u0085d"}\r\n', encoding="utf-8")
    result = awa_cli("job", "enqueue", "--kind", "k", "--file", str(source))
    assert result.returncode == 0, result.stderr
    assert sorted(j.args["s"] for j in sync_client.list_jobs()) == ["a\u2028b", "c\u0085d"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    blank = awa_cli("job", "enqueue", "--kind", "   ", "--file", str(empty))
    assert blank.returncode == 2 and "argument --kind" in blank.stderr
