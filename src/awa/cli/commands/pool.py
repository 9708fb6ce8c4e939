"""``awa pool set|clear|show`` — the fleet-wide weighted pool (CONTRACT §9)."""

from __future__ import annotations

import argparse
from typing import Any

import awa
from awa.cli.args import WEIGHTED_FORM, bounded_int, weighted_options, with_example
from awa.cli.output import print_json, print_table


def member(text: str) -> tuple[str, awa.PoolMember]:
    """``NAME[:min=N][,weight=N]`` for ``awa pool set --queue``."""
    name, values = weighted_options(text)
    return name, awa.PoolMember(min_workers=values.get("min", 0), weight=values.get("weight", 1))


def register(sub: Any) -> None:
    pool = sub.add_parser(
        "pool",
        help="the fleet-wide weighted pool shared by member queues",
        **with_example(
            "The fleet pool: member queues never run more than TOTAL jobs at once across the\n"
            "fleet; each with waiting jobs can reach its minimum; the rest is shared by weight.",
            "awa pool show",
        ),
    )
    actions = pool.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "set",
        help="replace the pool (whole state)",
        **with_example(
            "Replace the fleet pool: its total and ALL its members.",
            "awa pool set --total 40 --queue email:min=4,weight=3 --queue reports",
        ),
    )
    p.add_argument("--total", type=bounded_int(1), metavar="N", required=True,
                   help="most jobs the members run at once, fleet-wide")  # fmt: skip
    p.add_argument("--queue", dest="queues", type=member, action="append", required=True,
                   metavar=WEIGHTED_FORM, help="a member queue (repeat)")  # fmt: skip
    p.set_defaults(handler=run, check=check_set)
    p = actions.add_parser(
        "clear", help="remove the pool", **with_example("Remove the fleet pool.", "awa pool clear")
    )
    p.set_defaults(handler=run)
    p = actions.add_parser(
        "show",
        help="the pool, its members and what they run now",
        **with_example("Show the fleet pool and each member's running jobs.", "awa pool show"),
    )
    p.set_defaults(handler=run)


def pool_json(pool: awa.FleetPool | None) -> dict[str, Any] | None:
    """The pool as JSON (None: no pool)."""
    if pool is None:
        return None
    return {
        "total": pool.total,
        "updated_at": pool.updated_at.isoformat(),
        "queues": {
            name: {"min_workers": m.min_workers, "weight": m.weight,
                   "running": pool.running.get(name, 0)}
            for name, m in pool.queues.items()
        },
    }  # fmt: skip


def check_set(args: argparse.Namespace) -> None:
    """``pool set`` without the database: each member once, minimums within the total."""
    names = [name for name, _ in args.queues]
    if len(set(names)) != len(names):
        raise awa.ValidationError("queue", "a queue is named twice")
    minimums = sum(member.min_workers for _, member in args.queues)
    if minimums > args.total:
        refused = awa.MinWorkersExceedGlobal(minimums, args.total, limit="the pool total")
        raise awa.ValidationError("queue", refused.reason)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action == "set":
            await client.set_fleet_pool(args.total, dict(args.queues))
        elif args.action == "clear":
            await client.clear_fleet_pool()
        pool = await client.fleet_pool()
    if args.json:
        print_json(pool_json(pool))
    elif pool is None:
        print("no fleet pool")
    else:
        running = sum(pool.running.values())
        print_table(
            ("queue", "min workers", "weight", "running"),
            ((name, m.min_workers, m.weight, pool.running.get(name, 0))
             for name, m in pool.queues.items()),
            title=f"fleet pool: {running} of {pool.total} running",
        )  # fmt: skip
    return 0
