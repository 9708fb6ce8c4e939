"""``awa health`` — exit 0 when the database is reachable and migrated."""

from __future__ import annotations

import argparse
from typing import Any

import awa
from awa.cli.args import with_example
from awa.cli.output import print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "health",
        help="exit 0 when the database is reachable and the schema is current",
        **with_example("Readiness probe for scripts and containers.", "awa health && echo ready"),
    )
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        health = await client.health_check()
        schema_ok = True
        reason = "ok"
        try:
            await client.check_schema()
        except awa.AwaError as exc:
            schema_ok, reason = False, str(exc)
    ready = health.postgres_connected and schema_ok
    if args.json:
        print_json({"ready": ready, "postgres_connected": health.postgres_connected,
                    "schema_current": schema_ok, "reason": reason})  # fmt: skip
    else:
        print("ready" if ready else f"not ready: {reason}")
    return 0 if ready else 1
