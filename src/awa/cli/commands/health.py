"""``awa health`` — exit 0 when the database is reachable and migrated (and, with
``--worker``, when the workers on this host can make progress)."""

from __future__ import annotations

import argparse
import socket
from typing import Any

import awa
from awa.cli.args import with_example
from awa.cli.output import print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "health",
        help="exit 0 when the database is reachable and the schema is current",
        **with_example(
            "Readiness probe for scripts and containers. With --worker, also a liveness\n"
            "probe for the awa workers on this host: each must be running its loops and\n"
            "able to make progress on every queue (no queue whose permits are all held by\n"
            "stuck handlers), as its last published snapshot says.",
            "awa health --worker && echo ready",
        ),
    )
    p.add_argument("--worker", action="store_true",
                   help="also require the workers on this host to be healthy")  # fmt: skip
    p.set_defaults(handler=run)


def worker_problems(instances: list[awa.RuntimeInstance], hostname: str) -> list[str]:
    """What is wrong with the workers of ``hostname``, one line each (none: healthy)."""
    mine = [i for i in instances if i.hostname == hostname]
    if not mine:
        return [f"no awa worker on host {hostname} has published a snapshot in the last minute"]
    problems: list[str] = []
    for instance in mine:
        who = f"worker pid {instance.pid}"
        if instance.snapshot is None:
            problems.append(f"{who}: no readable snapshot")
            continue
        problems += [f"{who}: {problem}" for problem in instance.snapshot.problems()]
    return problems


async def run(args: argparse.Namespace, url: str | None) -> int:
    problems: list[str] = []
    async with awa.AsyncClient(url) as client:
        health = await client.health_check()
        schema_ok = True
        reason = "ok"
        try:
            await client.check_schema()
        except awa.AwaError as exc:
            schema_ok, reason = False, str(exc)
        if args.worker and health.postgres_connected and schema_ok:
            instances = await client.list_runtime_instances()
            problems = worker_problems(instances, socket.gethostname())
    ready = health.postgres_connected and schema_ok and not problems
    if problems:
        reason = "; ".join(problems)
    if args.json:
        print_json({"ready": ready, "postgres_connected": health.postgres_connected,
                    "schema_current": schema_ok, "reason": reason})  # fmt: skip
    else:
        print("ready" if ready else f"not ready: {reason}")
    return 0 if ready else 1
