"""``awa job get|list|cancel|retry|dump|retry-failed|discard`` (``explain`` and
``enqueue`` have modules of their own)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable
from typing import Any

import awa
from awa.cli.args import positive_int, row_id, with_example
from awa.cli.commands import job_enqueue, job_explain
from awa.cli.output import print_json, print_table, visible
from awa.types import CANCEL_APPLIES_TO, RETRY_APPLIES_TO


def register(sub: Any) -> None:
    job = sub.add_parser("job", help="inspect and act on jobs")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_text, example in (
        ("get", "show one job", "awa job get 42"),
        ("cancel", "cancel a job that has not finished", "awa job cancel 42"),
        ("retry", "make a job available again now", "awa job retry 42"),
        ("dump", "print every field of a job as JSON", "awa job dump 42"),
    ):
        p = actions.add_parser(name, help=help_text, **with_example(help_text, example))
        p.add_argument("id", type=row_id, metavar="ID")
        p.set_defaults(handler=run)
    p = actions.add_parser(
        "list",
        help="list jobs, newest first",
        **with_example("List jobs, newest first.", "awa job list --state failed --limit 20"),
    )
    p.add_argument("--state", choices=[s.value for s in awa.JobState])
    p.add_argument("--kind")
    p.add_argument("--queue")
    p.add_argument("--limit", type=positive_int, default=50)
    p.set_defaults(handler=run)
    job_explain.register(actions)
    p = actions.add_parser(
        "retry-failed",
        help="make every failed job of a kind and/or queue available again",
        **with_example(
            "Retry the failed jobs of a kind and/or a queue (at least one of the two).",
            "awa job retry-failed --kind send_email --queue email",
        ),
    )
    p.add_argument("--kind")
    p.add_argument("--queue")
    p.set_defaults(handler=run, check=check_retry_failed)
    p = actions.add_parser(
        "discard",
        help="delete the failed jobs of a kind",
        **with_example("Delete the failed jobs of one kind.", "awa job discard --kind send_email"),
    )
    p.add_argument("--kind", required=True)
    p.set_defaults(handler=run)
    job_enqueue.register(actions)


def _show(job: awa.Job[Any], as_json: bool) -> None:
    if as_json:
        print_json(job)
        return
    rows = [
        ("id", job.id), ("kind", job.kind), ("queue", job.queue), ("state", job.state),
        ("priority", job.priority), ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("run_lease", job.run_lease), ("args", job.args), ("tags", job.tags),
        ("created_at", job.created_at), ("run_at", job.run_at),
        ("attempted_at", job.attempted_at), ("finalized_at", job.finalized_at),
        ("errors", len(job.errors)),
    ]  # fmt: skip
    if job.ordering_key is not None:
        rows.insert(4, ("ordering_key", job.ordering_key))
    print_table(("field", "value"), rows)
    if job.errors:
        last = job.errors[-1]
        print(visible(f"last error (attempt {last.get('attempt')}): {last.get('error')}"))


def check_retry_failed(args: argparse.Namespace) -> None:
    """``job retry-failed`` names a kind, a queue or both (before any database)."""
    if args.kind is None and args.queue is None:
        raise awa.ValidationError("kind", "give --kind or --queue (or both)")


async def _pointing_at_dlq(
    client: awa.AsyncClient, job_id: int, work: Awaitable[awa.Job[Any]]
) -> awa.Job[Any]:
    """What ``work`` (a get, cancel or retry of ``job_id``) returns, or JobNotFound that
    says where a dead-lettered job went."""
    try:
        return await work
    except awa.JobNotFound as missing:
        try:
            await client.get_dlq_job(job_id)
        except awa.JobNotFound:
            raise missing from None
        missing.args = (
            f"job {job_id} is in the dead letter queue (awa dlq get {job_id}; "
            f"awa dlq retry {job_id} runs it again)",
        )
        raise missing from None


# The states each action changes (from the API's statements); in another it changes
# nothing, and the CLI says so rather than print the job as if it had acted.
_APPLIES_TO = {"cancel": CANCEL_APPLIES_TO, "retry": RETRY_APPLIES_TO}


async def _act(client: awa.AsyncClient, action: str, job_id: int) -> awa.Job[Any]:
    """Cancel or retry ``job_id`` when its state is one the action changes; otherwise say
    on stderr that there is nothing to do (the job is still printed; exit status 0)."""
    job = await _pointing_at_dlq(client, job_id, client.get_job(job_id))
    if job.state not in _APPLIES_TO[action]:
        print(f"nothing to {action}: job {job_id} is {job.state.value}", file=sys.stderr)
        return job
    return await (client.cancel(job_id) if action == "cancel" else client.retry(job_id))


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action == "list":
            filters = {"state": args.state, "kind": args.kind, "queue": args.queue}
            if args.json:  # whole jobs: scripts read their args
                print_json(await client.list_jobs(**filters, limit=args.limit))
            else:
                jobs = await client.list_job_summaries(**filters, limit=args.limit)
                print_table(
                    ("id", "kind", "queue", "state", "attempt", "run_at"),
                    ((j.id, j.kind, j.queue, j.state, f"{j.attempt}/{j.max_attempts}", j.run_at)
                     for j in jobs),
                )  # fmt: skip
            return 0
        if args.action == "retry-failed":
            if args.json:
                print_json(await client.retry_failed(kind=args.kind, queue=args.queue))
            else:
                count = await client._retry_failed_count(kind=args.kind, queue=args.queue)
                print(f"retried {count} failed job(s)")
            return 0
        if args.action == "discard":
            count = await client.discard_failed(args.kind)
            if args.json:
                print_json({"discarded": count})
            else:
                print(f"discarded {count} failed job(s)")
            return 0
        if args.action in _APPLIES_TO:
            job = await _act(client, args.action, args.id)
        else:
            job = await _pointing_at_dlq(client, args.id, client.get_job(args.id))
        _show(job, args.json or args.action == "dump")
    return 0
