"""``awa batch preview|apply|show|list|cancel|resume``: durable batch operations."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import awa
from awa.cli.args import positive_int, row_id, with_example
from awa.cli.output import ProgressLine, print_json, print_table

OPS = ("move-queue", "set-priority")


def _operation(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", choices=OPS, metavar="OP", help="move-queue or set-priority")
    p.add_argument("--to", metavar="QUEUE", help="move-queue: the queue to move jobs to")
    p.add_argument("--priority", type=positive_int, help="set-priority: 1 (highest) … 4")
    p.add_argument("--kind")
    p.add_argument("--queue")
    p.add_argument("--state", choices=["available", "scheduled", "retryable"])
    p.add_argument("--id", dest="ids", type=row_id, action="append", metavar="ID",
                   help="only this job (repeat for several)")  # fmt: skip


def register(sub: Any) -> None:
    group = sub.add_parser("batch", help="preview, apply and follow batch operations")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "preview",
        help="how many waiting jobs an operation would change (changes nothing)",
        **with_example("Count and sample the jobs an operation would change.",
                       "awa batch preview move-queue --to email-slow --kind newsletter"),
    )  # fmt: skip
    _operation(p)
    p.add_argument("--sample", type=positive_int, default=10)
    p.set_defaults(handler=run, check=_op)
    p = actions.add_parser(
        "apply",
        help="apply an operation in chunks, with progress (Ctrl-C stops following it: a "
        "worker's leader carries it on, or `awa batch resume ID`)",
        **with_example("Apply move-queue or set-priority to the waiting jobs that match, in "
                       "chunks (one transaction each). Here: move them to another queue, 500 "
                       "per transaction.",
                       "awa batch apply move-queue --to email-slow --queue email "
                       "--chunk-size 500"),
    )  # fmt: skip
    _operation(p)
    p.add_argument("--chunk-size", type=positive_int, default=1_000)
    p.add_argument("--all", action="store_true", dest="allow_all",
                   help="act on every waiting job when no filter is given")  # fmt: skip
    p.add_argument("--detach", action="store_true",
                   help="submit only: a worker's maintenance leader carries it out")  # fmt: skip
    p.add_argument("--by", dest="submitted_by", metavar="NAME", help="recorded as the submitter")
    p.set_defaults(handler=run, check=check_apply)
    for name, help_text, example in (
        ("show", "one operation and its progress", "awa batch show 7"),
        ("cancel", "end an operation after the chunk in flight, for good", "awa batch cancel 7"),
        ("resume", "carry an interrupted operation on to its end", "awa batch resume 7"),
    ):
        p = actions.add_parser(name, help=help_text, **with_example(help_text, example))
        p.add_argument("id", type=row_id, metavar="ID")
        p.set_defaults(handler=run)
    p = actions.add_parser(
        "list",
        help="operations, newest first",
        **with_example("Operations, newest first.", "awa batch list --state running"),
    )
    p.add_argument("--state", choices=["pending", "running", "completed", "cancelled"])
    p.add_argument("--limit", type=positive_int, default=20)
    p.set_defaults(handler=run)


def _op(args: argparse.Namespace) -> awa.MoveQueue | awa.SetPriority:
    # The other operation's flag is refused, not ignored: given both, an operator would
    # believe both were applied.
    if args.op == "move-queue" and args.priority is not None:
        raise awa.ValidationError("priority", "move-queue does not take it (set-priority does)")
    if args.op == "set-priority" and args.to is not None:
        raise awa.ValidationError("to", "set-priority does not take it (move-queue does)")
    if args.op == "move-queue":
        if args.to is None:
            raise awa.ValidationError("to", "move-queue needs the queue to move jobs to")
        try:
            return awa.MoveQueue(args.to)
        except awa.ValidationError as exc:  # the API calls it queue; here it is --to
            raise awa.ValidationError("to", exc.reason) from None
    if args.priority is None:
        raise awa.ValidationError("priority", "set-priority needs the priority (1 … 4)")
    return awa.SetPriority(args.priority)


def _filter(args: argparse.Namespace) -> dict[str, Any]:
    return {"kind": args.kind, "queue": args.queue, "state": args.state, "ids": args.ids}


def _show(op: awa.BatchOperation, as_json: bool) -> None:
    if as_json:
        print_json(op)
        return
    print_table(
        ("id", "op", "spec", "state", "total", "processed", "skipped", "progress", "by"),
        [(op.id, op.op, op.spec, op.state, op.total, op.processed, op.skipped,
          f"{op.percent:.0f}%", op.submitted_by)],
    )  # fmt: skip


def check_apply(args: argparse.Namespace) -> None:
    """``batch apply`` without the database: a whole operation, and jobs to apply it to."""
    _op(args)
    if not args.allow_all and all(v is None for v in _filter(args).values()):
        raise awa.ValidationError(
            "all", "no filter given: pass --kind, --queue, --state or --id, or --all"
        )


async def _apply(client: awa.AsyncClient, args: argparse.Namespace) -> awa.BatchOperation:
    op = await client.apply_batch(
        _op(args), **_filter(args), chunk_size=args.chunk_size, allow_all=args.allow_all,
        submitted_by=args.submitted_by, wait=False,
    )  # fmt: skip
    if args.detach:
        return op
    bar = ProgressLine(f"batch {op.id}", op.total, enabled=not args.json)
    done = [0]

    def advance(current: awa.BatchOperation) -> None:
        visited = current.processed + current.skipped
        bar.advance(visited - done[0])
        done[0] = visited

    if args.json or not sys.stderr.isatty():  # the bar, which names it, is not shown
        sys.stderr.write(
            f"awa: batch {op.id}: {op.total} job(s); if this is interrupted, awa batch "
            f"resume {op.id} or a worker's maintenance leader carries it on (awa batch "
            f"cancel {op.id} ends it)\n"
        )
    try:
        return await client.run_batch(op.id, on_progress=advance)
    finally:
        bar.close()


async def run(args: argparse.Namespace, url: str | None) -> int:
    async with awa.AsyncClient(url) as client:
        if args.action == "preview":
            preview = await client.preview_batch(_op(args), **_filter(args), sample=args.sample)
            if args.json:
                print_json(preview)
                return 0
            print(f"{preview.total} job(s) would change; the first {len(preview.sample)}:")
            print_table(("id", "kind", "queue", "state", "priority", "run_at"),
                        ((j.id, j.kind, j.queue, j.state, j.priority, j.run_at)
                         for j in preview.sample))  # fmt: skip
            return 0
        if args.action == "list":
            ops = await client.list_batches(state=args.state, limit=args.limit)
            if args.json:
                print_json(ops)
            else:
                print_table(("id", "op", "spec", "state", "total", "processed", "skipped",
                             "created_at"),
                            ((o.id, o.op, o.spec, o.state, o.total, o.processed, o.skipped,
                              o.created_at) for o in ops))  # fmt: skip
            return 0
        if args.action == "apply":
            op = await _apply(client, args)
        elif args.action == "cancel":
            op = await client.cancel_batch(args.id)
        elif args.action == "resume":
            op = await client.run_batch(args.id)
        else:
            op = await client.get_batch(args.id)
        _show(op, args.json)
    return 0
