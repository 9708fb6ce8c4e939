"""``awa dlq list|get|depth|retry|purge|move``: the dead letter queue."""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Any

import awa
from awa import validate
from awa.cli.args import positive_int, row_id, with_example
from awa.cli.output import plain, print_json, print_table, report

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``90``, ``30s``, ``15m``, ``2h`` or ``7d`` as seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 30s, 15m, 2h or 7d, got {text!r}"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _filters(p: argparse.ArgumentParser, *, bulk: bool, age: bool = True) -> None:
    p.add_argument("--kind")
    p.add_argument("--queue")
    if age:
        p.add_argument("--older-than", type=duration, metavar="DURATION",
                       help="moved to the DLQ longer ago than this (30s, 15m, 2h, 7d)")  # fmt: skip
    if bulk:
        p.add_argument("ids", nargs="*", type=row_id, metavar="ID")
        p.add_argument("--all", action="store_true", dest="allow_all",
                       help="act on every matching job when no filter is given")  # fmt: skip


def register(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="inspect, count, retry, purge and fill the dead letter queue")
    actions = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "list",
        help="dead-lettered jobs, most recent first",
        **with_example("Dead-lettered jobs, most recent first.", "awa dlq list --queue email"),
    )
    _filters(p, bulk=False)
    p.add_argument("--limit", type=positive_int, default=50)
    p.add_argument("--before", metavar="CURSOR",
                   help="next page: the cursor of the previous page's last entry")  # fmt: skip
    p.set_defaults(handler=run)
    p = actions.add_parser(
        "get",
        help="one dead-lettered job",
        **with_example("One dead-lettered job, with why and when it moved.", "awa dlq get 42"),
    )
    p.add_argument("id", type=row_id, metavar="ID")
    p.set_defaults(handler=run)
    p = actions.add_parser(
        "depth",
        help="how many jobs are in the DLQ, in all and per queue",
        **with_example("Count dead-lettered jobs per queue.", "awa dlq depth --queue email"),
    )
    p.add_argument("--queue")
    p.set_defaults(handler=run, check=check_depth)
    p = actions.add_parser(
        "retry",
        help="move jobs back to available with a fresh attempt budget",
        **with_example("Retry dead-lettered jobs.", "awa dlq retry --kind send_email"),
    )
    _filters(p, bulk=True)
    p.set_defaults(handler=run, check=check_filtered)
    p = actions.add_parser(
        "purge",
        help="delete dead-lettered jobs for good",
        **with_example("Delete dead-lettered jobs.", "awa dlq purge --older-than 30d"),
    )
    _filters(p, bulk=True)
    p.set_defaults(handler=run, check=check_filtered)
    p = actions.add_parser(
        "move",
        help="move failed jobs (any queue) into the DLQ",
        **with_example("Move failed jobs into the DLQ.", "awa dlq move --kind send_email"),
    )
    _filters(p, bulk=True, age=False)
    p.add_argument("--reason", help="recorded as the reason (default: each job's last error)")
    p.set_defaults(handler=run, check=check_filtered)


def _entry(dead: awa.DeadLetter) -> dict[str, Any]:
    return {**plain(dead), "cursor": dead.cursor}


async def _list(client: awa.AsyncClient, args: argparse.Namespace) -> None:
    dead = await client.list_dlq(kind=args.kind, queue=args.queue, older_than=args.older_than,
                                 limit=args.limit, before=args.before)  # fmt: skip
    if args.json:
        print_json([_entry(d) for d in dead])
        return
    print_table(
        ("id", "kind", "queue", "attempt", "moved at", "reason"),
        ((d.job.id, d.job.kind, d.job.queue, f"{d.job.attempt}/{d.job.max_attempts}",
          d.dlq_at, d.reason) for d in dead),
    )  # fmt: skip
    if len(dead) == args.limit:
        print(f"next page: {_next_page(args, dead[-1].cursor)}")


def _next_page(args: argparse.Namespace, cursor: str) -> str:
    """The command that lists the next page of the same listing: its filters and limit,
    and the cursor of this page's last entry."""
    words = ["awa", "dlq", "list"]
    if args.kind is not None:
        words += ["--kind", args.kind]
    if args.queue is not None:
        words += ["--queue", args.queue]
    if args.older_than is not None:
        seconds = f"{args.older_than:.3f}".rstrip("0").rstrip(".")  # the form duration() reads
        words += ["--older-than", f"{seconds}s"]
    words += ["--limit", str(args.limit), "--before", cursor]
    return shlex.join(words)


async def _depth(client: awa.AsyncClient, args: argparse.Namespace) -> None:
    queues = await client.dlq_depth_by_queue()
    if args.queue is not None:
        queues = {args.queue: queues[args.queue]} if args.queue in queues else {}
    total = sum(queues.values())
    if args.json:
        print_json({"total": total, "queues": queues})
        return
    print_table(("queue", "depth"), [*queues.items(), ("total", total)])


def check_filtered(args: argparse.Namespace) -> None:
    """A bulk action names the jobs it acts on, or says --all (before any database)."""
    aged = hasattr(args, "older_than")  # `move` takes failed jobs: they have no DLQ age
    unfiltered = not args.ids and args.kind is None and args.queue is None
    if unfiltered and getattr(args, "older_than", None) is None and not args.allow_all:
        filters = "IDs, --kind, --queue or --older-than" if aged else "IDs, --kind or --queue"
        raise awa.ValidationError("all", f"no filter given: pass {filters}, or --all")


def check_depth(args: argparse.Namespace) -> None:
    """``--queue`` names a queue, as everywhere else (an empty name matches nothing)."""
    if args.queue is not None:
        validate.text("queue", args.queue)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action == "list":
            await _list(client, args)
            return 0
        if args.action == "depth":
            await _depth(client, args)
            return 0
        if args.action == "get":
            dead = await client.get_dlq_job(args.id)
            print_json(_entry(dead)) if args.json else print_table(
                ("field", "value"),
                [("id", dead.job.id), ("kind", dead.job.kind), ("queue", dead.job.queue),
                 ("attempt", f"{dead.job.attempt}/{dead.job.max_attempts}"),
                 ("moved at", dead.dlq_at), ("reason", dead.reason), ("args", dead.job.args)],
            )  # fmt: skip
            return 0
        ids = args.ids or None
        common = {"kind": args.kind, "queue": args.queue, "allow_all": args.allow_all}
        if args.action == "move":
            count = await client.move_failed_to_dlq(ids, reason=args.reason, **common)
            report(args.json, {"moved": count}, f"moved {count} job(s)")
        elif args.action == "retry":
            since = args.older_than
            if args.json:
                report(True, await client.retry_from_dlq(ids, older_than=since, **common), "")
            else:
                count = await client._retry_from_dlq_count(ids, older_than=since, **common)
                report(False, {"retried": count}, f"retried {count} job(s)")
        else:
            count = await client.purge_dlq(ids, older_than=args.older_than, **common)
            report(args.json, {"purged": count}, f"purged {count} job(s)")
    return 0
