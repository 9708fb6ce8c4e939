"""``awa worker MODULE:CLIENT`` — run the handlers registered on a client until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
from typing import Any

import awa
from awa.cli.args import non_negative_int, positive_int, queue_workers, with_example
from awa.extras import require


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="run a worker for the tasks registered on a client",
        **with_example(
            "Import MODULE, take its client CLIENT (an awa.AsyncClient or awa.Client with\n"
            "tasks registered) and run its handlers. SIGTERM or SIGINT shuts down gracefully.",
            "awa worker myapp.jobs:client --queue email=10 --queue reports=2",
        ),
    )
    p.add_argument("target", metavar="MODULE:CLIENT")
    p.add_argument("--queue", dest="queues", action="append", type=queue_workers, default=[],
                   metavar="NAME=N", help="a queue and its max_workers (repeatable)")  # fmt: skip
    p.add_argument("--global-max-workers", type=positive_int, metavar="N",
                   help="weighted mode: one shared pool of N workers")  # fmt: skip
    p.add_argument("--shutdown-timeout-ms", type=positive_int, default=5_000, metavar="MS")
    p.add_argument("--metrics-port", type=non_negative_int, metavar="N",
                   help="serve /metrics for Prometheus on port N (0 picks one)")  # fmt: skip
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address for --metrics-port (default 127.0.0.1)")  # fmt: skip
    p.set_defaults(handler=run, needs_db=lambda a: False)


def _on_signal(sig: signal.Signals, stop: asyncio.Event, timeout_ms: int) -> None:
    """First signal: shut down gracefully. Second: exit now (deploys must not hang)."""
    if not stop.is_set():
        sys.stderr.write(
            f"awa: {sig.name}: shutting down (running jobs get {timeout_ms} ms); "
            "a second signal exits at once\n"
        )
        stop.set()
        return
    sys.stderr.write(
        f"awa: {sig.name} again: exiting now; jobs still running here are returned by the "
        "rescuer once their heartbeats are stale\n"
    )
    sys.stderr.flush()
    os._exit(128 + sig.value)


def load_client(target: str) -> awa.AsyncClient:
    """The AsyncClient named by ``MODULE:ATTRIBUTE`` (a sync Client gives its async core)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:CLIENT, got {target!r}")
    sys.path.insert(0, "")
    module = importlib.import_module(module_name)
    obj = getattr(module, attribute, None)
    if isinstance(obj, awa.Client):
        return obj.async_client
    if isinstance(obj, awa.AsyncClient):
        return obj
    raise ValueError(f"{target} is not an awa.AsyncClient or awa.Client")


async def run(args: argparse.Namespace, url: str | None) -> int:
    if args.metrics_port is not None:
        require("metrics", "--metrics-port")
    try:
        client = load_client(args.target)
    except (ImportError, ValueError) as exc:
        sys.stderr.write(f"awa: error: argument MODULE:CLIENT: {exc}\n")
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, sig, stop, args.shutdown_timeout_ms)
    queues = args.queues or None
    metrics_server = None
    if args.metrics_port is not None:
        from awa import metrics

        try:
            metrics_server = metrics.serve(client, port=args.metrics_port, host=args.metrics_host)
        except OSError as exc:
            sys.stderr.write(f"awa: error: argument --metrics-port: cannot listen: {exc}\n")
            return 2
        sys.stderr.write(f"awa: metrics on {metrics_server.url}\n")
    await client.start(queues, global_max_workers=args.global_max_workers)
    sys.stderr.write(f"awa: worker running ({', '.join(client.registry.queues())}); Ctrl-C stops\n")
    try:
        await stop.wait()
    finally:
        await client.shutdown(timeout_ms=args.shutdown_timeout_ms)
        await client.close()
        if metrics_server is not None:
            metrics_server.stop()
    return 0
