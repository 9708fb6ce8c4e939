"""DLQ management: moving failed jobs in by id or filter, depth, one entry, cursor paging
(API on both clients and the CLI) on real PostgreSQL."""

from __future__ import annotations

import json
import shlex
from typing import Any

import psycopg
import pytest

import awa
from awa.cli.main import main as cli


async def _failed(
    client: awa.AsyncClient, db: psycopg.Connection[Any], n: int, *, kind: str, queue: str
) -> list[int]:
    jobs = await client.insert_many([{"i": i} for i in range(n)], kind=kind, queue=queue)
    ids = [j.id for j in jobs]
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(), "
        "errors = jsonb_build_array(jsonb_build_object('error', 'boom ' || id, 'attempt', 1)) "
        "WHERE id = ANY(%s)",
        (ids,),
    )
    return ids


async def test_move_failed_jobs_by_id_and_by_filter(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    mail = await _failed(client, db, 3, kind="send", queue="mail")
    other = await _failed(client, db, 2, kind="report", queue="reports")
    waiting = await client.insert({}, kind="send", queue="mail")  # not failed: stays

    with pytest.raises(awa.ValidationError) as refused:
        await client.move_failed_to_dlq()
    assert refused.value.field == "filter"

    assert await client.move_failed_to_dlq(mail[0]) == 1
    one = await client.get_dlq_job(mail[0])
    assert one.job.id == mail[0] and one.reason == f"boom {mail[0]}"  # the last error
    assert one.job.state is awa.JobState.FAILED and one.job.errors[0]["attempt"] == 1
    with pytest.raises(awa.JobNotFound):
        await client.get_job(mail[0])  # moved, not copied

    assert await client.move_failed_to_dlq(kind="send", reason="triaged by ops") == 2
    assert (await client.get_dlq_job(mail[1])).reason == "triaged by ops"
    assert await client.move_failed_to_dlq(kind="send") == 0  # nothing failed is left
    assert (await client.get_job(waiting.id)).state is awa.JobState.AVAILABLE

    assert await client.move_failed_to_dlq(other, queue="elsewhere") == 0  # filters intersect
    assert await client.move_failed_to_dlq(allow_all=True) == 2

    assert await client.dlq_depth() == 5
    assert await client.dlq_depth("mail") == 3 and await client.dlq_depth("nowhere") == 0
    assert await client.dlq_depth_by_queue() == {"mail": 3, "reports": 2}

    with pytest.raises(awa.JobNotFound):
        await client.get_dlq_job(waiting.id)
    for bad in (0, True, "7"):
        with pytest.raises(awa.ValidationError):
            await client.get_dlq_job(bad)  # type: ignore[arg-type]
    with pytest.raises(awa.ValidationError):
        await client.move_failed_to_dlq([1, 0])

    retried = await client.retry_from_dlq(kind="report")  # the way back still works
    assert sorted(j.id for j in retried) == sorted(other)


async def test_cursor_paging_visits_every_entry_once_in_order(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    first = await _failed(client, db, 7, kind="k", queue="q")
    await client.move_failed_to_dlq(kind="k")  # 7 entries moved at the same instant
    later = await _failed(client, db, 4, kind="k", queue="q")
    await client.move_failed_to_dlq(kind="k")

    pages: list[list[int]] = []
    before: str | None = None
    while True:
        page = await client.list_dlq(limit=3, before=before)
        if not page:
            break
        pages.append([d.job.id for d in page])
        before = page[-1].cursor
    seen = [job_id for page in pages for job_id in page]
    assert seen == sorted(later, reverse=True) + sorted(first, reverse=True)
    assert [len(p) for p in pages] == [3, 3, 3, 2]

    assert await client.list_dlq(queue="q", limit=2, before=before) == []  # past the end
    for bad in ("nope", "2024-01-01T00:00:00|x", "2024-01-01T00:00:00|3", 42):
        with pytest.raises(awa.ValidationError) as caught:
            await client.list_dlq(before=bad)  # type: ignore[arg-type]
        assert caught.value.field == "before"


def test_sync_client_dlq_parity(sync_client: awa.Client, db: psycopg.Connection[Any]) -> None:
    job = sync_client.insert({}, kind="k", queue="q")
    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (job.id,))
    assert sync_client.move_failed_to_dlq([job.id]) == 1
    assert sync_client.dlq_depth() == 1 and sync_client.dlq_depth_by_queue() == {"q": 1}
    assert sync_client.get_dlq_job(job.id).reason == "failed"  # no error recorded


def test_dlq_cli(
    sync_client: awa.Client,
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = [sync_client.insert({}, kind="send", queue="mail").id for _ in range(3)]
    ids.append(sync_client.insert({}, kind="report", queue="reports").id)
    db.execute("UPDATE awa.jobs SET state = 'failed'")
    base = ["--database-url", database_url, "dlq"]
    assert cli([*base, "move", str(ids[0])]) == 0
    assert "moved 1 job(s)" in capsys.readouterr().out
    assert cli([*base, "move", "--kind", "send", "--reason", "ops"]) == 0
    capsys.readouterr()
    assert cli([*base, "move"]) == 2  # no filter
    assert "argument --all" in capsys.readouterr().err
    assert cli([*base, "move", "--all"]) == 0
    capsys.readouterr()

    assert cli([*base, "depth", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"total": 4, "queues": {"mail": 3, "reports": 1}}
    assert cli([*base, "depth", "--queue", "mail", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"total": 3, "queues": {"mail": 3}}
    assert cli([*base, "depth"]) == 0
    assert "total" in capsys.readouterr().out

    assert cli([*base, "get", str(ids[1]), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["job"]["id"] == ids[1] and got["reason"] == "ops" and "|" in got["cursor"]
    assert cli([*base, "get", "999999"]) == 1
    capsys.readouterr()

    assert cli([*base, "list", "--limit", "2", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert len(page) == 2
    assert cli([*base, "list", "--limit", "5", "--before", page[-1]["cursor"], "--json"]) == 0
    rest = json.loads(capsys.readouterr().out)
    assert len(rest) == 2 and {e["job"]["id"] for e in page}.isdisjoint(
        e["job"]["id"] for e in rest
    )
    assert cli([*base, "list", "--before", "garbage"]) == 2
    assert "--before" in capsys.readouterr().err

    # A full page's "next page" command lists the next page of the same listing.
    assert cli([*base, "list", "--queue", "mail", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    (hint,) = [line for line in out.splitlines() if line.startswith("next page: ")]
    words = shlex.split(hint.removeprefix("next page: "))
    assert words[:3] == ["awa", "dlq", "list"]
    assert words[3:7] == ["--queue", "mail", "--limit", "2"]
    assert cli([*base[:-1], *words[1:], "--json"]) == 0
    following = json.loads(capsys.readouterr().out)
    assert [e["job"]["queue"] for e in following] == ["mail"]  # the third mail job only

    # --json on the commands that change things: one document each.
    assert cli([*base, "retry", str(ids[3]), "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] == [ids[3]]
    assert cli([*base, "purge", "--queue", "mail", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"purged": 3}
    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (ids[3],))
    assert cli([*base, "move", str(ids[3]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"moved": 1}
