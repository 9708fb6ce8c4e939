"""``awa runtime list`` — live worker processes, their queues, modes and held permits."""

from __future__ import annotations

import argparse
from typing import Any

import awa
from awa.cli.args import positive_int, with_example
from awa.cli.output import print_json, print_table, visible


def register(sub: Any) -> None:
    runtime = sub.add_parser("runtime", help="inspect live worker processes")
    actions = runtime.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "list",
        help="live workers, their queues, modes and held permits",
        **with_example(
            "List the worker processes that published their runtime snapshot recently (every\n"
            "10 s while alive): instance, host, pid, leader, concurrency mode, and per queue\n"
            "the permits held by running jobs (in flight) against its capacity, and the\n"
            "fleet's limits on it as the worker last read them.",
            "awa runtime list --json",
        ),
    )
    p.add_argument("--fresh-ms", type=positive_int, default=60_000, metavar="MS",
                   help="only workers seen within MS (default 60000)")  # fmt: skip
    p.set_defaults(handler=run)


def capacity_json(capacity: awa.HardReserved | awa.Weighted) -> dict[str, Any]:
    """A capacity with its mode named (``hard_reserved`` or ``weighted``)."""
    if isinstance(capacity, awa.HardReserved):
        return {"mode": "hard_reserved", "max_workers": capacity.max_workers}
    return {
        "mode": "weighted",
        "min_workers": capacity.min_workers,
        "weight": capacity.weight,
        "overflow_held": capacity.overflow_held,
    }


def instance_json(instance: awa.RuntimeInstance) -> dict[str, Any]:
    """One live worker as ``awa runtime list --json`` prints it."""
    snap = instance.snapshot
    return {
        "instance_id": instance.instance_id,
        "hostname": instance.hostname,
        "pid": instance.pid,
        "is_leader": instance.is_leader,
        "started_at": instance.started_at.isoformat(),
        "last_seen_at": instance.last_seen_at.isoformat(),
        "seen_ago_s": round(instance.seen_ago_s, 3),
        "mode": snap.mode if snap else None,
        "global_max_workers": snap.global_max_workers if snap else None,
        "queues": {
            name: {
                "in_flight": q.in_flight,
                "capacity": capacity_json(q.capacity),
                "paused": q.paused,
                "fleet": q.fleet,
            }
            for name, q in sorted(snap.queues.items())
        }
        if snap
        else {},
    }


def _capacity_text(capacity: awa.HardReserved | awa.Weighted) -> str:
    if isinstance(capacity, awa.HardReserved):
        return f"max {capacity.max_workers}"
    return f"min {capacity.min_workers}, weight {capacity.weight}"


def fleet_text(fleet: awa.QueueFleet | None) -> str:
    """A queue's fleet view in a few words: ``cap 10 · 5/s per tenant · pool min 2 weight 3
    of 12 · fleet running 7 · held back: concurrency``."""
    if fleet is None:
        return "-"
    parts = []
    limits = fleet.limits
    if limits is not None:
        per_key = f" per {limits.partition_by}" if limits.partition_by else ""
        if limits.concurrency is not None:
            parts.append(f"cap {limits.concurrency}{per_key}")
        if limits.rate_limit is not None:
            parts.append(f"{limits.rate_limit:g}/s{per_key}")
    member = fleet.pool_member
    if member is not None:
        parts.append(f"pool min {member.min_workers} weight {member.weight} of {fleet.pool_total}")
    if fleet.running is not None:
        parts.append(f"fleet running {fleet.running}")
    if fleet.blocked is not None:
        parts.append(f"held back: {fleet.blocked}")
    return " · ".join(parts)


def _print_instances(instances: list[awa.RuntimeInstance]) -> None:
    for i in instances:
        snap = i.snapshot
        mode = "-" if snap is None else snap.mode
        if snap is not None and snap.global_max_workers is not None:
            mode += f", global max {snap.global_max_workers}"
        seen = i.seen_ago_s
        print(
            visible(
                f"worker {i.hostname}:{i.pid} ({i.instance_id[:8]})"
                f"{' · leader' if i.is_leader else ''} · {mode} · seen {seen:.0f} s ago"
            )
        )
        rows = []
        for name, q in sorted(snap.queues.items()) if snap else []:
            held = q.capacity.overflow_held if isinstance(q.capacity, awa.Weighted) else "-"
            rows.append(
                (name, q.in_flight, _capacity_text(q.capacity), held, q.paused, fleet_text(q.fleet))
            )
        print_table(("queue", "in flight", "capacity", "overflow held", "paused", "fleet"), rows)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        instances = await client.list_runtime_instances(fresh_ms=args.fresh_ms)
    if args.json:
        print_json([instance_json(i) for i in instances])
    elif not instances:
        print("no live workers")
    else:
        _print_instances(instances)
    return 0
