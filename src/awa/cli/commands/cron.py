"""``awa cron list|pause|resume|trigger|remove``: periodic schedules."""

from __future__ import annotations

import argparse
from typing import Any

import awa
from awa.cli.args import with_example
from awa.cli.output import print_json, print_table, report


def register(sub: Any) -> None:
    cron = sub.add_parser("cron", help="inspect and control periodic (cron) schedules")
    actions = cron.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "list",
        help="schedules with pause state, last and next fire",
        **with_example("Every stored schedule, its last and next fire.", "awa cron list --json"),
    )
    p.set_defaults(handler=run)
    for name, help_text, example in (
        ("pause", "stop firing a schedule", "awa cron pause nightly-report"),
        ("resume", "fire a schedule again (missed fires are skipped)",
         "awa cron resume nightly-report"),
        ("trigger", "enqueue one job of a schedule now", "awa cron trigger nightly-report"),
        ("remove", "delete a schedule (workers that register it re-create it)",
         "awa cron remove nightly-report"),
    ):  # fmt: skip
        p = actions.add_parser(name, help=help_text, **with_example(help_text, example))
        p.add_argument("name", metavar="NAME")
        p.set_defaults(handler=run)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action == "list":
            schedules = await client.list_cron_schedules()
            if args.json:
                print_json(schedules)
            else:
                print_table(
                    ("name", "cron", "timezone", "kind", "queue", "policy", "paused",
                     "last fire", "next fire"),
                    ((s.name, s.cron_expr, s.timezone, s.kind, s.queue, s.missed_fire_policy,
                      s.paused, s.last_fire_at, s.next_fire_at) for s in schedules),
                )  # fmt: skip
            return 0
        if args.action == "pause":
            schedule = await client.pause_cron(args.name)
            report(args.json, schedule, f"paused {args.name}")
        elif args.action == "resume":
            schedule = await client.resume_cron(args.name)
            report(args.json, schedule, f"resumed {args.name}")
        elif args.action == "trigger":
            job = await client.trigger_cron(args.name)
            report(args.json, job, f"enqueued job {job.id} ({job.kind} on {job.queue})")
        else:
            await client.remove_cron(args.name)
            report(args.json, {"removed": args.name}, f"removed {args.name}")
    return 0
