"""``awa dlq list|retry|purge``: the dead letter queue."""

from __future__ import annotations

import argparse
import re
from typing import Any

import awa
from awa.cli.args import positive_int, with_example
from awa.cli.output import print_json, print_table

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``90``, ``30s``, ``15m``, ``2h`` or ``7d`` as seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 30s, 15m, 2h or 7d, got {text!r}"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _filters(p: argparse.ArgumentParser, *, bulk: bool) -> None:
    p.add_argument("--kind")
    p.add_argument("--queue")
    p.add_argument("--older-than", type=duration, metavar="DURATION",
                   help="moved to the DLQ longer ago than this (30s, 15m, 2h, 7d)")  # fmt: skip
    if bulk:
        p.add_argument("ids", nargs="*", type=positive_int, metavar="ID")
        p.add_argument("--all", action="store_true", dest="allow_all",
                       help="act on every dead-lettered job when no filter is given")  # fmt: skip


def register(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="inspect, retry and purge the dead letter queue")
    actions = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "list",
        help="dead-lettered jobs, most recent first",
        **with_example("Dead-lettered jobs, most recent first.", "awa dlq list --queue email"),
    )
    _filters(p, bulk=False)
    p.add_argument("--limit", type=positive_int, default=50)
    p.set_defaults(handler=run)
    p = actions.add_parser(
        "retry",
        help="move jobs back to available with a fresh attempt budget",
        **with_example("Retry dead-lettered jobs.", "awa dlq retry --kind send_email"),
    )
    _filters(p, bulk=True)
    p.set_defaults(handler=run)
    p = actions.add_parser(
        "purge",
        help="delete dead-lettered jobs for good",
        **with_example("Delete dead-lettered jobs.", "awa dlq purge --older-than 30d"),
    )
    _filters(p, bulk=True)
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action == "list":
            dead = await client.list_dlq(
                kind=args.kind, queue=args.queue, older_than=args.older_than, limit=args.limit
            )
            if args.json:
                print_json(dead)
            else:
                print_table(
                    ("id", "kind", "queue", "attempt", "moved at", "reason"),
                    ((d.job.id, d.job.kind, d.job.queue, f"{d.job.attempt}/{d.job.max_attempts}",
                      d.dlq_at, d.reason) for d in dead),
                )  # fmt: skip
            return 0
        options = {
            "kind": args.kind,
            "queue": args.queue,
            "older_than": args.older_than,
            "allow_all": args.allow_all,
        }
        ids = args.ids or None
        if args.action == "retry":
            jobs = await client.retry_from_dlq(ids, **options)
            print(f"retried {len(jobs)} job(s)")
        else:
            count = await client.purge_dlq(ids, **options)
            print(f"purged {count} job(s)")
    return 0
