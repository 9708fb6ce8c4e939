"""``awa migrate [--sql]``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import awa
from awa.cli.args import with_example
from awa.cli.database import configured_url
from awa.cli.output import print_json
from awa.db.migrations import render_sql


def register(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="apply pending schema migrations",
        **with_example("Create or upgrade the awa schema.", "awa migrate --sql > awa.sql"),
    )
    p.add_argument("--sql", action="store_true",
                   help="print the pending migrations' SQL instead of applying it (every "
                   "migration when no database is named)")  # fmt: skip
    p.set_defaults(handler=run, needs_db=lambda a: not a.sql)


async def run(args: argparse.Namespace, url: str | None) -> int:
    if args.sql:
        # With a database named (flag or environment): its pending migrations. Without
        # one, every migration, for an empty database (no embedded server is started).
        target = configured_url(url)
        if target is None:
            text = render_sql()
        else:
            async with awa.AsyncClient(target) as client:
                text = await client.migration_sql()
        if args.json:  # one JSON document, as every --json prints
            print_json({"sql": text})
        else:
            sys.stdout.write(text)
        return 0
    async with awa.AsyncClient(url) as client:
        applied = await client.migrate()
    if args.json:
        sys.stdout.write(f'{{"applied": {applied}}}\n')
    elif applied:
        print(f"applied migrations: {', '.join(f'{v:04d}' for v in applied)}")
    else:
        print("schema is up to date")
    return 0
