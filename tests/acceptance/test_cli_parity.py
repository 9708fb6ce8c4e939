"""CLI commands the API already had (issue 20.6) and the parity features' commands."""

from __future__ import annotations

import psycopg

import awa
from tests.acceptance.conftest import Awa
from tests.acceptance.support import db_state


def _fail(database_url: str, *job_ids: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', finalized_at = now(), attempt = 1 "
            "WHERE id = ANY(%s)",
            (list(job_ids),),
        )


def test_job_retry_failed_and_discard(
    awa_cli: Awa, sync_client: awa.Client, database_url: str
) -> None:
    a = sync_client.insert({"n": 1}, kind="send", queue="mail")
    b = sync_client.insert({"n": 2}, kind="send", queue="other")
    c = sync_client.insert({"n": 3}, kind="report", queue="mail")
    untouched = sync_client.insert({"n": 4}, kind="send", queue="mail")
    _fail(database_url, a.id, b.id, c.id)

    retried = awa_cli("job", "retry-failed", "--kind", "send", "--queue", "mail", "--json")
    assert retried.returncode == 0, retried.stderr
    assert [job["id"] for job in retried.json()] == [a.id]
    assert sync_client.get_job(a.id).state is awa.JobState.AVAILABLE
    assert sync_client.get_job(b.id).state is awa.JobState.FAILED

    plain = awa_cli("job", "retry-failed", "--queue", "other")
    assert plain.returncode == 0 and "retried 1 failed job(s)" in plain.stdout

    discarded = awa_cli("job", "discard", "--kind", "report", "--json")
    assert discarded.returncode == 0 and discarded.json() == {"discarded": 1}
    assert [j.id for j in sync_client.list_jobs(kind="report")] == []
    assert sync_client.get_job(untouched.id).state is awa.JobState.AVAILABLE


def test_job_bulk_commands_refuse_missing_filters(
    awa_cli: Awa, sync_client: awa.Client, database_url: str
) -> None:
    job = sync_client.insert({"n": 1}, kind="send", queue="mail")
    _fail(database_url, job.id)
    before = db_state(database_url)
    for args, flag in (
        (["job", "retry-failed"], "--kind"),
        (["job", "discard"], "--kind"),
        (["job", "discard", "--kind", ""], "--kind"),
    ):
        result = awa_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr_lines) == 1 and flag in result.stderr_lines[0], result.stderr
    assert db_state(database_url) == before


# -- batch operations --------------------------------------------------------------------


def test_batch_preview_apply_show_list(awa_cli: Awa, sync_client: awa.Client) -> None:
    jobs = sync_client.insert_many([{"n": i} for i in range(5)], kind="send", queue="email")
    sync_client.insert({"n": 9}, kind="report", queue="email")

    preview = awa_cli("batch", "preview", "move-queue", "--to", "slow", "--kind", "send",
                      "--sample", "2", "--json")  # fmt: skip
    assert preview.returncode == 0, preview.stderr
    assert preview.json()["total"] == 5 and len(preview.json()["sample"]) == 2
    plain = awa_cli("batch", "preview", "set-priority", "--priority", "1", "--queue", "email")
    assert plain.returncode == 0 and "6 job(s) would change" in plain.stdout
    assert {j.queue for j in sync_client.list_jobs()} == {"email"}  # preview changed nothing

    applied = awa_cli("batch", "apply", "move-queue", "--to", "slow", "--kind", "send",
                      "--chunk-size", "2", "--by", "alice", "--json")  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    op = applied.json()
    assert (op["state"], op["total"], op["processed"], op["submitted_by"]) == (
        "completed", 5, 5, "alice")  # fmt: skip
    assert {sync_client.get_job(j.id).queue for j in jobs} == {"slow"}

    detached = awa_cli("batch", "apply", "set-priority", "--priority", "1", "--id",
                       str(jobs[0].id), "--id", str(jobs[1].id), "--detach", "--json")  # fmt: skip
    assert detached.returncode == 0 and detached.json()["state"] == "pending"
    pending_id = detached.json()["id"]
    shown = awa_cli("batch", "show", str(pending_id))
    assert shown.returncode == 0 and "pending" in shown.stdout
    resumed = awa_cli("batch", "resume", str(pending_id), "--json")
    assert resumed.json()["state"] == "completed" and resumed.json()["processed"] == 2
    listed = awa_cli("batch", "list", "--json").json()
    assert [o["id"] for o in listed] == [pending_id, op["id"]]
    cancelled = awa_cli("batch", "cancel", str(op["id"]), "--json")
    assert cancelled.json()["state"] == "completed"  # ended already: unchanged


def test_batch_bad_input_exits_2_naming_the_flag(
    awa_cli: Awa, sync_client: awa.Client, database_url: str
) -> None:
    sync_client.insert({"n": 1}, kind="send", queue="email")
    before = db_state(database_url)
    for args, flag in (
        (["batch", "apply", "move-queue", "--queue", "email"], "--to"),
        (["batch", "apply", "set-priority", "--queue", "email"], "--priority"),
        (["batch", "apply", "set-priority", "--priority", "7", "--queue", "email"], "--priority"),
        (["batch", "apply", "move-queue", "--to", "x"], "--all"),
        (["batch", "apply", "move-queue", "--to", "x", "--state", "running"], "--state"),
        (["batch", "apply", "move-queue", "--to", "x", "--queue", "q", "--chunk-size", "0"],
         "--chunk-size"),
        (["batch", "apply", "move-queue", "--to", "", "--queue", "email"], "--to"),
        (["batch", "show", "0"], "ID"),
        (["batch", "explode"], "ACTION"),
    ):  # fmt: skip
        result = awa_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr_lines) == 1 and flag in result.stderr_lines[0], (args, result)
    missing = awa_cli("batch", "show", "4242")
    assert missing.returncode == 1 and "4242" in missing.stderr
    assert db_state(database_url) == before
