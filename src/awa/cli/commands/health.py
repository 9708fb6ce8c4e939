"""``awa health`` — exit 0 when the database is reachable and migrated (and, with
``--worker``, when the workers on this host can make progress)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import awa
from awa.cli.args import with_example
from awa.cli.output import print_json
from awa.config import INSTANCE_EXPIRY_MS


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


_SLACK = timedelta(seconds=5)  # between the database's clock and this host's


def _process_started_at(pid: int) -> datetime | None:
    """When process ``pid`` started (Linux: /proc), or None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime"))
        ticks = int(after_name[19])  # field 22, "starttime", in clock ticks since boot
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"), UTC)


def still_running(instance: awa.RuntimeInstance) -> bool:
    """The process that published ``instance`` still runs on this host: its pid is
    alive, and (where /proc tells) that process started before the worker did — not
    another that got the pid since."""
    try:
        os.kill(instance.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    started = _process_started_at(instance.pid)
    # On this host's clock, as /proc's: the snapshot's own start (the row's is the
    # database's, minutes off on a host whose clock is: a healthy worker read as gone).
    own_start = instance.snapshot.started_at if instance.snapshot else instance.started_at
    return started is None or started <= own_start + _SLACK


def worker_problems(
    instances: Sequence[awa.RuntimeInstance],
    hostname: str,
    silent: Sequence[awa.RuntimeInstance] = (),
) -> list[str]:
    """What is wrong with the workers of ``hostname``, one line each (none: healthy).

    ``instances``: those that published in the last minute; ``silent``: older rows, of which
    a worker whose process still runs here has stopped publishing (a frozen event loop,
    a SIGSTOP) — a problem, where before it only dropped out of sight."""
    # A fresh row of a process that is gone (killed within the last minute) is no worker:
    # counted, it kept a host whose workers had all died "ready" for a minute (a review).
    mine = [i for i in instances if i.hostname == hostname and still_running(i)]
    live_pids = {i.pid for i in mine}
    frozen = [
        i for i in silent
        if i.hostname == hostname and i.pid not in live_pids and still_running(i)
    ]  # fmt: skip
    if not mine and not frozen:
        return [f"no awa worker on host {hostname} has published a snapshot in the last minute"]
    problems = [
        f"worker pid {i.pid}: has published no snapshot in the last minute, yet its process "
        "runs (frozen?)"
        for i in frozen
    ]
    for instance in mine:
        who = f"worker pid {instance.pid}"
        if instance.snapshot is None:
            problems.append(f"{who}: no readable snapshot")
            continue
        problems += [f"{who}: {problem}" for problem in instance.snapshot.problems()]
    return problems


# The whole probe's bound: a database that accepts connections but does not answer
# (frozen, a network partition) is reported within a probe's usual timeout, not after
# libpq's connect timeout twice over.
PROBE_BOUND_S = 5.0


async def _diagnose(
    client: awa.AsyncClient, args: argparse.Namespace
) -> tuple[bool, bool, str, list[str]]:
    """(database reachable, schema current, why not or "ok", the workers' problems)."""
    try:
        await client.check_schema()  # connects first: libpq's reason when it cannot
    except (awa.SchemaNotMigrated, awa.SchemaTooNew) as exc:
        return True, False, str(exc), []
    except awa.DatabaseError as exc:
        return False, False, str(exc), []
    if not args.worker:
        return True, True, "ok", []
    fresh = await client.list_runtime_instances()  # the last minute's
    seen = {i.instance_id for i in fresh}
    kept = await client.list_runtime_instances(fresh_ms=INSTANCE_EXPIRY_MS)
    silent = [i for i in kept if i.instance_id not in seen]
    return True, True, "ok", worker_problems(fresh, socket.gethostname(), silent)


async def run(args: argparse.Namespace, url: str | None) -> int:
    client = awa.AsyncClient(url)  # not ``async with``: it would raise where we report
    try:
        async with asyncio.timeout(PROBE_BOUND_S):
            connected, schema_ok, reason, problems = await _diagnose(client, args)
    except TimeoutError:
        connected, schema_ok, problems = False, False, []
        reason = f"the database did not answer in {PROBE_BOUND_S:g} s"
    finally:
        await client.close()
    ready = schema_ok and not problems
    if problems:
        reason = "; ".join(problems)
    if args.json:
        print_json({"ready": ready, "postgres_connected": connected,
                    "schema_current": schema_ok, "reason": reason})  # fmt: skip
    else:
        print("ready" if ready else f"not ready: {reason}")
    return 0 if ready else 1
