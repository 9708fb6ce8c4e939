"""``awa queue overrides set|clear|show`` — runtime overrides (design record 038).

Registered under ``awa queue`` by :mod:`awa.cli.commands.queue`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import awa
from awa.cli.args import bounded_int, rate, with_example
from awa.cli.output import print_json, print_table, visible
from awa.config import LIVE_WITHIN_MS
from awa.override_keys import KEYS

SETTINGS = KEYS
APPLY_NOTE = (
    "note: live workers apply overrides within their refresh cadence "
    "(AWA_OVERRIDE_REFRESH_MS, default 10 s; usually at once through a notice)"
)


def register(actions: Any) -> None:
    """Add ``overrides`` to the ``awa queue`` actions."""
    group = actions.add_parser(
        "overrides",
        help="runtime overrides that live workers apply without a restart",
        **with_example(
            "Runtime overrides: poll interval, claim batch size, rate limit, deadline and\n"
            "per-process permits of a queue, stored in the database and applied live by every\n"
            "worker.",
            "awa queue overrides show email",
        ),
    )
    sub = group.add_subparsers(dest="overrides_action", required=True, metavar="ACTION")
    p = sub.add_parser(
        "set",
        help="replace a queue's overrides (whole state)",
        **with_example(
            "Replace ALL overrides of QUEUE (whole-state write): a setting you do not give is\n"
            "stored as unset and reverts to the value the workers were started with.\n"
            "Live workers apply the change within their refresh cadence\n"
            "(AWA_OVERRIDE_REFRESH_MS, default 10 s; usually at once through a notice).\n"
            "A rate override on a queue started without a limiter creates one. A deadline\n"
            "override never crosses zero, --max-workers applies to hard-reserved workers and\n"
            "--min-workers/--weight to weighted ones, and minimums never exceed\n"
            "global_max_workers; workers report overrides they refuse as ignored\n"
            "(see `awa queue overrides show`). Shrinking permits interrupts no running job.",
            "awa queue overrides set email --poll-interval-ms 500 --rate-limit 20",
        ),
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--poll-interval-ms", type=bounded_int(1), metavar="N",
                   help="poll interval in ms (>= 1)")  # fmt: skip
    p.add_argument("--claim-batch-size", type=bounded_int(1), metavar="N",
                   help="most jobs claimed per statement (>= 1)")  # fmt: skip
    p.add_argument("--rate-limit", type=rate, metavar="F", help="jobs per second (1e-06 to 1e+06)")
    p.add_argument("--max-workers", type=bounded_int(1), metavar="N",
                   help="permits per process, hard-reserved mode (>= 1)")  # fmt: skip
    p.add_argument("--min-workers", type=bounded_int(0), metavar="N",
                   help="guaranteed permits per process, weighted mode (>= 0)")  # fmt: skip
    p.add_argument("--weight", type=bounded_int(1), metavar="N",
                   help="share of the overflow pool, weighted mode (>= 1)")  # fmt: skip
    p.add_argument("--deadline-ms", type=bounded_int(0), metavar="N",
                   help="attempt deadline in ms (>= 0)")  # fmt: skip
    p.set_defaults(handler=run, check=check_set)
    p = sub.add_parser(
        "clear",
        help="remove every override of a queue",
        **with_example(
            "Remove every override of QUEUE: workers go back to their start-time values\n"
            "within their refresh cadence.",
            "awa queue overrides clear email",
        ),
    )
    p.add_argument("queue", metavar="QUEUE")
    p.set_defaults(handler=run)
    p = sub.add_parser(
        "show",
        help="stored overrides and the effective values of live workers",
        **with_example(
            "Show the stored overrides (and when they were last written) of QUEUE, or of every\n"
            "queue, and for each live worker its configured and effective values and the\n"
            "overrides it ignored, with the reason.",
            "awa queue overrides show email --json",
        ),
    )
    p.add_argument("queue", metavar="QUEUE", nargs="?")
    p.set_defaults(handler=run)


def _stored_json(stored: awa.RuntimeOverrides | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    return {
        **{k: getattr(stored, k) for k in SETTINGS},
        "updated_at": stored.updated_at.isoformat() if stored.updated_at else None,
    }


def _workers(instances: list[awa.RuntimeInstance], queue: str) -> list[dict[str, Any]]:
    workers = []
    for instance in instances:
        runtime = instance.snapshot.queues.get(queue) if instance.snapshot else None
        if runtime is not None:
            workers.append({
                "instance_id": instance.instance_id,
                "hostname": instance.hostname,
                "pid": instance.pid,
                "configured": runtime.configured,
                "overrides": runtime.overrides,
                "effective": runtime.effective,
                "ignored": runtime.ignored,
            })  # fmt: skip
    return workers


async def _show(client: awa.AsyncClient, queue: str | None) -> list[dict[str, Any]]:
    """Per queue: the stored overrides (a RuntimeOverrides or None) and the live workers."""
    instances = await client.list_runtime_instances(fresh_ms=LIVE_WITHIN_MS)
    if queue is not None:
        names = [queue]
    else:
        known = {s.queue for s in await client.queue_stats()}
        known.update(q for i in instances if i.snapshot for q in i.snapshot.queues)
        names = sorted(known)
    return [
        {
            "queue": name,
            "stored": await client.queue_runtime_overrides(name),
            "workers": _workers(instances, name),
        }
        for name in names
    ]


def _entry_json(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "stored": _stored_json(entry["stored"])}


SHORT = ("poll ms", "batch", "rate/s", "deadline ms", "max", "min", "weight")


def _print_show(entries: list[dict[str, Any]]) -> None:
    print_table(
        ("queue", *SHORT, "updated"),
        ((e["queue"], *(getattr(e["stored"], k, None) for k in SETTINGS),
          getattr(e["stored"], "updated_at", None)) for e in entries),
        title="stored overrides (- = start-time value)",
    )  # fmt: skip
    workers = [(e["queue"], w) for e in entries for w in e["workers"]]
    if not workers:
        print("no live worker runs these queues")
    for queue, w in workers:
        print(
            "\n"
            + visible(f"{queue} on worker {w['hostname']}:{w['pid']} ({w['instance_id'][:8]}):")
        )
        print_table(
            ("setting", "configured", "override", "effective", "ignored because"),
            ((k, w["configured"].get(k), w["overrides"].get(k), w["effective"].get(k),
              w["ignored"].get(k)) for k in SETTINGS),
        )  # fmt: skip


def _print_stored(queue: str, stored: awa.RuntimeOverrides) -> None:
    print_table(
        ("setting", "stored"),
        [*((k, getattr(stored, k)) for k in SETTINGS), ("updated_at", stored.updated_at)],
        title=f"overrides of {queue} (- = start-time value)",
    )


def check_set(args: argparse.Namespace) -> None:
    """``overrides set`` without the database: something to set."""
    if all(getattr(args, k, None) is None for k in SETTINGS):
        raise awa.ValidationError(
            "overrides set", "give at least one of --poll-interval-ms, --claim-batch-size, "
            "--rate-limit, --deadline-ms, --max-workers, --min-workers, --weight "
            "(`awa queue overrides clear` removes them all)",
        )  # fmt: skip


async def run(args: argparse.Namespace, url: str | None) -> int:
    action = args.overrides_action
    values = {k: getattr(args, k, None) for k in SETTINGS}
    async with awa.AsyncClient(url) as client:
        if action == "show":
            entries = await _show(client, args.queue)
            if args.json:
                shown = [_entry_json(e) for e in entries]
                print_json(shown[0] if args.queue is not None else shown)
            else:
                _print_show(entries)
            return 0
        if action == "set":
            stored = await client.set_runtime_overrides(args.queue, **values)
        else:
            stored = await client.clear_runtime_overrides(args.queue)
    if args.json:
        print_json({"queue": args.queue, "stored": _stored_json(stored)})
    else:
        _print_stored(args.queue, stored)
    sys.stderr.write(APPLY_NOTE + "\n")
    return 0
