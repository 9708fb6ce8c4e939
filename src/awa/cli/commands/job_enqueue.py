"""``awa job enqueue`` — bulk-insert jobs from a JSON-lines file, with a progress bar."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import awa
from awa import validate
from awa.cli.args import positive_int, with_example
from awa.cli.output import ProgressLine, print_json
from awa.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from awa.errors import AwaError, ValidationError
from awa.serialization import encode_json


def register(actions: Any) -> None:
    p = actions.add_parser(
        "enqueue",
        help="bulk-insert jobs from a JSON-lines file",
        **with_example(
            "Insert one job per line of FILE, each line the JSON object of its args. The file\n"
            "is read and checked first, then written in one transaction (COPY batches):\n"
            "either every line becomes a job or none does.",
            "awa job enqueue --kind send_email --queue email --file jobs.jsonl",
        ),
    )
    p.add_argument("--file", required=True, metavar="FILE", help="JSON lines; - for stdin")
    p.add_argument("--kind", required=True)
    p.add_argument("--queue", default=DEFAULT_QUEUE)
    p.add_argument(
        "--priority", type=int, choices=range(1, 5), default=DEFAULT_PRIORITY, metavar="1-4"
    )
    p.add_argument("--max-attempts", type=positive_int, default=DEFAULT_MAX_ATTEMPTS)
    p.add_argument(
        "--ordering-key",
        type=_ordering_key,
        metavar="KEY",
        help="the jobs run one at a time, in file order, after earlier jobs of KEY",
    )
    p.add_argument("--batch-size", type=positive_int, default=5_000)
    p.set_defaults(handler=run, check=check)


def _ordering_key(text: str) -> str:
    try:
        return validate.ordering_key(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _read(source: str) -> list[dict[str, Any]] | str:
    """The args of every non-blank line, or a one-line reason the file is unusable."""
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {source}: {exc}"
    rows = []
    # Lines end at "\n" (and "\r\n") only: U+2028 and its like may stand unescaped in a
    # JSON string, and str.splitlines() would cut there.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line, parse_constant=_refuse, parse_float=_finite)
        except ValueError as exc:
            return f"line {number} is not JSON ({exc})"
        except RecursionError:
            return f"line {number} is nested too deeply to read as JSON"
        if not isinstance(value, dict):
            return f"line {number} is not a JSON object of job args"
        try:
            encode_json(value)  # what jsonb refuses (NUL, a lone surrogate): named by line
        except AwaError as exc:
            return f"line {number}: {exc}"
        rows.append(value)
    return rows


def check(args: argparse.Namespace) -> None:
    """Before any database: the names (even when the file holds no job), then the file,
    read whole into ``args.rows`` (it may be stdin: read once)."""
    validate.name("kind", args.kind)
    validate.name("queue", args.queue)
    rows = _read(args.file)
    if isinstance(rows, str):
        raise awa.ValidationError("file", rows)
    args.rows = rows


async def run(args: argparse.Namespace, url: str | None) -> int:
    rows = args.rows
    options = {"kind": args.kind, "queue": args.queue, "priority": args.priority,
               "max_attempts": args.max_attempts,
               "ordering_key": args.ordering_key}  # fmt: skip
    progress = ProgressLine("enqueue", len(rows), enabled=not args.json)
    async with awa.AsyncClient(url) as client:
        try:
            async with client.transaction() as tx:
                for start in range(0, len(rows), args.batch_size):
                    chunk = rows[start : start + args.batch_size]
                    await tx.insert_many(chunk, **options)
                    progress.advance(len(chunk))
        finally:
            progress.close()
    if args.json:
        print_json({"inserted": len(rows), "kind": args.kind, "queue": args.queue})
    else:
        print(f"enqueued {len(rows)} {args.kind} job(s) on {args.queue}")
    return 0
