"""``awa job explain ID``: why a job is not running, as a headline and its reasons."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import Any

import awa
from awa.cli.args import row_id, with_example
from awa.cli.output import print_json, print_lines

MAX_WIDTH = 100
INDENT = "    "


def register(actions: Any) -> None:
    help_text = "say why a job is not running (or where it runs, or how it ended)"
    p = actions.add_parser(
        "explain",
        help=help_text,
        **with_example(
            "Say why a job is not running: a headline, then every reason that applies, "
            "most decisive first.",
            "awa job explain 42",
        ),
    )
    p.add_argument("id", type=row_id, metavar="ID")
    p.set_defaults(handler=run)


def render(explanation: awa.Explanation, width: int) -> str:
    """The headline, then each reason: its number and code, its message indented."""
    lines = [*textwrap.wrap(explanation.summary, width), ""]
    for number, reason in enumerate(explanation.reasons, 1):
        lines.append(f"{number:>2}. {reason.code}")
        lines += textwrap.wrap(
            reason.message, width, initial_indent=INDENT, subsequent_indent=INDENT
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        explanation = await client.explain(args.id)
    if args.json:
        print_json(explanation)
    else:
        width = min(shutil.get_terminal_size((MAX_WIDTH, 24)).columns, MAX_WIDTH)
        print_lines(render(explanation, max(width, 40)))
    return 0
