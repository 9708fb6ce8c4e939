"""``awa queue list|stats|pause|resume|drain`` (and ``overrides``, see overrides.py)."""

from __future__ import annotations

import argparse
from typing import Any

import awa
from awa.cli.args import with_example
from awa.cli.commands import limits, overrides
from awa.cli.output import print_json, print_table, report


def register(sub: Any) -> None:
    queue = sub.add_parser("queue", help="inspect and control queues")
    actions = queue.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "list",
        help="queue names and pause state",
        **with_example("List every queue that has jobs or a control row.", "awa queue list --json"),
    )
    p.set_defaults(handler=run)
    p = actions.add_parser(
        "stats",
        help="counts per state, lag and pause",
        **with_example("Per-queue counts per state, lag and pause state.", "awa queue stats"),
    )
    p.set_defaults(handler=run)
    for name, help_text, example in (
        ("pause", "stop every worker claiming from a queue", "awa queue pause email --by alice"),
        ("resume", "resume claiming from a queue", "awa queue resume email"),
        ("drain", "cancel every waiting job of a queue", "awa queue drain email"),
    ):
        p = actions.add_parser(name, help=help_text, **with_example(help_text, example))
        p.add_argument("queue", metavar="QUEUE")
        if name == "pause":
            p.add_argument("--by", dest="paused_by", help="who paused it (recorded)")
        p.set_defaults(handler=run)
    overrides.register(actions)  # `awa queue overrides set|clear|show`
    limits.register(actions)  # `awa queue limits set|clear|show`


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action in ("list", "stats"):
            stats = await client.queue_stats()
            if args.action == "list":
                if args.json:
                    print_json([{"queue": s.queue, "paused": s.paused} for s in stats])
                else:
                    print_table(("queue", "paused"), ((s.queue, s.paused) for s in stats))
            elif args.json:
                print_json(stats)
            else:
                print_table(
                    ("queue", "available", "scheduled", "running", "retryable", "failed",
                     "completed/h", "lag s", "paused"),
                    ((s.queue, s.available, s.scheduled, s.running, s.retryable, s.failed,
                      s.completed_last_hour, s.lag_seconds, s.paused) for s in stats),
                )  # fmt: skip
            return 0
        if args.action == "pause":
            await client.pause_queue(args.queue, paused_by=args.paused_by)
            report(args.json, {"queue": args.queue, "paused": True}, f"paused {args.queue}")
        elif args.action == "resume":
            await client.resume_queue(args.queue)
            report(args.json, {"queue": args.queue, "paused": False}, f"resumed {args.queue}")
        else:
            count = await client.drain_queue(args.queue)
            report(args.json, {"queue": args.queue, "cancelled": count},
                   f"drained {args.queue}: {count} job(s) cancelled")  # fmt: skip
    return 0
