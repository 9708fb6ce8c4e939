"""``awa queue limits set|clear|show`` — fleet-wide queue limits (CONTRACT §8).

Registered under ``awa queue`` by :mod:`awa.cli.commands.queue`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import awa
from awa.cli.args import bounded_int, rate, with_example
from awa.cli.output import print_json, print_table
from awa.config import LIVE_WITHIN_MS
from awa.types import bucket_size

APPLY_NOTE = (
    "note: every worker applies fleet limits within its refresh cadence "
    "(usually at once through a notice); running jobs are never interrupted"
)


def register(actions: Any) -> None:
    """Add ``limits`` to the ``awa queue`` actions."""
    group = actions.add_parser(
        "limits",
        help="fleet-wide limits: concurrency caps, rate limits, partitions",
        **with_example(
            "Fleet-wide limits of a queue, held across every worker process and host:\n"
            "a concurrency cap, a rate limit with its burst, optionally per value of an\n"
            "args key (partitions).",
            "awa queue limits show email",
        ),
    )
    sub = group.add_subparsers(dest="limits_action", required=True, metavar="ACTION")
    p = sub.add_parser(
        "set",
        help="replace a queue's fleet limits (whole state)",
        **with_example(
            "Replace ALL fleet limits of QUEUE: a limit you do not give is removed.\n"
            "--concurrency: never more than N of the queue's jobs running, fleet-wide.\n"
            "--rate-limit/--burst: starts in any T seconds <= F x T + burst (default ceil(F)).\n"
            "--partition-by KEY: both limits apply per value of args[KEY].",
            "awa queue limits set email --concurrency 10 --rate-limit 5",
        ),
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--concurrency", type=bounded_int(1), metavar="N",
                   help="most jobs running fleet-wide (>= 1)")  # fmt: skip
    p.add_argument("--rate-limit", type=rate, metavar="F",
                   help="jobs started per second (1e-6 to 1e6)")  # fmt: skip
    p.add_argument("--burst", type=bounded_int(1), metavar="N",
                   help="bucket size (>= 1; default ceil(rate))")  # fmt: skip
    p.add_argument("--partition-by", metavar="KEY",
                   help="a top-level args key: limits per value of it")  # fmt: skip
    p.set_defaults(handler=run, check=check_set)
    p = sub.add_parser(
        "clear",
        help="remove a queue's fleet limits",
        **with_example("Remove every fleet limit of QUEUE.", "awa queue limits clear email"),
    )
    p.add_argument("queue", metavar="QUEUE")
    p.set_defaults(handler=run)
    p = sub.add_parser(
        "show",
        help="stored limits and what the fleet runs now",
        **with_example(
            "Show the fleet limits of QUEUE (or of every limited queue), when they were\n"
            "written, the jobs the fleet runs now, the busiest partitions and the tokens left;\n"
            "then, per live worker running the queue, whether it applies the stored limits\n"
            "and why the fleet last held back its claims.",
            "awa queue limits show --json",
        ),
    )
    p.add_argument("queue", metavar="QUEUE", nargs="?")
    p.set_defaults(handler=run)


def status_json(status: awa.QueueLimitsStatus) -> dict[str, Any]:
    """One limited queue as JSON (`awa queue limits show --json`)."""
    limits = status.limits
    return {
        "queue": limits.queue,
        "concurrency": limits.concurrency,
        "rate_limit": limits.rate_limit,
        "burst": limits.burst,
        "partition_by": limits.partition_by,
        "updated_at": limits.updated_at.isoformat(),
        "running": status.running,
        "top_partitions": [{"key": k, "running": n} for k, n in status.top_partitions],
        "tokens": status.tokens,
    }


def workers_json(
    instances: list[awa.RuntimeInstance], limits: awa.QueueLimits
) -> list[dict[str, Any]]:
    """Each live worker running ``limits.queue``: does it apply these limits (it has read
    them since they were written), the fleet's running count it last read, and why the
    fleet last held back its claims."""
    workers = []
    for instance in instances:
        runtime = instance.snapshot.queues.get(limits.queue) if instance.snapshot else None
        if runtime is None:
            continue
        fleet = runtime.fleet or awa.QueueFleet()
        workers.append({
            "instance_id": instance.instance_id,
            "hostname": instance.hostname,
            "pid": instance.pid,
            "applied": fleet.limits == limits,
            "fleet_running": fleet.running,
            "blocked": fleet.blocked,
            "holds": fleet.holds,
        })  # fmt: skip
    return workers


def _print_workers(
    statuses: list[awa.QueueLimitsStatus], instances: list[awa.RuntimeInstance]
) -> None:
    rows = [
        (s.limits.queue, f"{w['hostname']}:{w['pid']}", "yes" if w["applied"] else "not yet",
         w["fleet_running"], w["blocked"], w["holds"])
        for s in statuses for w in workers_json(instances, s.limits)
    ]  # fmt: skip
    if rows:
        print_table(
            ("queue", "worker", "applies these", "fleet running seen", "held back by", "holds"),
            rows,
            title="live workers (as of their last snapshot, every 10 s)",
        )


def _print_status(statuses: list[awa.QueueLimitsStatus], queue: str | None) -> None:
    if not statuses:
        print(f"queue {queue} has no fleet limits" if queue else "no queue has fleet limits")
        return
    print_table(
        ("queue", "cap", "running", "rate/s", "burst", "tokens", "per key", "busiest keys",
         "updated"),
        ((s.limits.queue, s.limits.concurrency, s.running, s.limits.rate_limit, _burst(s.limits),
          s.tokens, s.limits.partition_by,
          [f"{k or '(none)'}={n}" for k, n in s.top_partitions], s.limits.updated_at)
         for s in statuses),
        title="fleet limits (- = none)",
    )  # fmt: skip


def check_set(args: argparse.Namespace) -> None:
    """``limits set`` without the database: a burst needs a rate; something to set."""
    if args.burst is not None and args.rate_limit is None:
        raise awa.ValidationError("burst", "needs --rate-limit (a burst is the size of its bucket)")
    if args.concurrency is None and args.rate_limit is None and args.partition_by is None:
        raise awa.ValidationError(
            "limits set", "give at least one of --concurrency, --rate-limit, --partition-by "
            "(`awa queue limits clear` removes them all)",
        )  # fmt: skip


async def run(args: argparse.Namespace, url: str | None) -> int:
    action = args.limits_action
    async with awa.AsyncClient(url) as client:
        if action == "set":
            await client.set_queue_limits(
                args.queue,
                concurrency=args.concurrency,
                rate_limit=args.rate_limit,
                burst=args.burst,
                partition_by=args.partition_by,
            )
        elif action == "clear":
            await client.clear_queue_limits(args.queue)
        statuses = await client.queue_limits_status(getattr(args, "queue", None))
        instances = (
            await client.list_runtime_instances(fresh_ms=LIVE_WITHIN_MS) if action == "show" else []
        )
    if args.json:
        shown = [status_json(s) for s in statuses]
        if action == "show":
            for entry, status in zip(shown, statuses, strict=True):
                entry["workers"] = workers_json(instances, status.limits)
        if action == "show" and args.queue is None:
            print_json(shown)
        else:
            print_json(shown[0] if shown else {"queue": args.queue, "limits": None})
    else:
        _print_status(statuses, getattr(args, "queue", None))
        _print_workers(statuses, instances)
    if action != "show":
        sys.stderr.write(APPLY_NOTE + "\n")
    return 0


def _burst(limits: awa.QueueLimits) -> int | str | None:
    """The burst in force: the stored one, or for a rate stored without one its default
    (``-`` read as "none", where ceil(rate) starts at once, a review)."""
    if limits.rate_limit is None or limits.burst is not None:
        return limits.burst
    return f"{bucket_size(limits.rate_limit, None)} (default)"
