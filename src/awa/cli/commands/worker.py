"""``awa worker MODULE:CLIENT`` — run the handlers registered on a client until SIGTERM/SIGINT.

With ``--processes N`` the command becomes a supervisor of N such workers
(:mod:`awa.supervisor`), each started as this same command without ``--processes``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import socket
import sys
from collections.abc import Coroutine
from typing import Any, cast

import awa
import awa.log
from awa.cli import early_signals, stop_signals
from awa.cli.args import (
    WEIGHTED_FORM,
    QueueFlag,
    SettingFlag,
    bounded_int,
    positive_int,
    postgres_url,
    process_count,
    queue_flag,
    setting_flag,
    with_example,
)
from awa.cli.database import configured_url, database_url
from awa.cli.output import fail
from awa.config import MAX_CONNECTIONS, START_SETTINGS, StartSettings, build_worker_config
from awa.errors import BuildError, MinWorkersExceedGlobal
from awa.extras import require
from awa.supervisor import ChildLink, Supervisor

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# Directories a parent (manage.py awa_worker) had on its import path that a child
# started as `python -m awa worker` would lack; read only here, unlike a PYTHONPATH,
# which would reach every program a handler starts.
IMPORT_PATH_VARIABLE = "AWA_WORKER_IMPORT_PATH"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="run a worker for the tasks registered on a client",
        **with_example(
            "Import MODULE, take its client CLIENT (an awa.AsyncClient or awa.Client with\n"
            "tasks registered) and run its handlers. SIGTERM or SIGINT shuts down gracefully.\n"
            "--processes N runs N worker processes under a supervisor that restarts a\n"
            "crashed one, forwards SIGTERM/SIGINT to all, and serves one --metrics-port.",
            "awa worker myapp.jobs:client --queue email=10 --queue reports=2\n"
            "  awa worker myapp.jobs:client --global-max-workers 20 --queue email:min=4,weight=3\n"
            "  awa worker myapp.jobs:client --processes auto --metrics-port 9464\n"
            "  awa worker myapp.jobs:client --set heartbeat_interval_ms=5000 "
            "--set heartbeat_staleness_ms=20000",
        ),
    )
    p.add_argument("target", metavar="MODULE:CLIENT")
    p.add_argument("--queue", dest="queues", action="append", type=queue_flag, default=[],
                   metavar="NAME=N|" + WEIGHTED_FORM,
                   help="a queue and its max_workers; with --global-max-workers, its "
                   "guaranteed minimum and weight instead (repeatable)")  # fmt: skip
    p.add_argument("--global-max-workers", type=positive_int, metavar="N",
                   help="weighted mode: one shared pool of N workers")  # fmt: skip
    p.add_argument("--shutdown-timeout-ms", type=positive_int, default=5_000, metavar="MS",
                   help="how long running jobs get to finish after a stop signal before "
                   "they are stopped and retried (failed on their last attempt; default "
                   "5000)")  # fmt: skip
    p.add_argument("--processes", type=process_count, metavar="N|auto",
                   help="run N worker processes under a supervisor (auto: 1 per core)")  # fmt: skip
    p.add_argument("--max-connections", type=bounded_int(1, MAX_CONNECTIONS), metavar="N",
                   help="most pooled connections per process (default: the client's)")  # fmt: skip
    p.add_argument("--listen-url", type=postgres_url, metavar="URL",
                   default=os.environ.get("AWA_LISTEN_URL") or None,
                   help="a direct connection for LISTEN and the leader when the client's "
                   "URL goes through PgBouncer (default: $AWA_LISTEN_URL)")  # fmt: skip
    p.add_argument("--metrics-port", type=bounded_int(0, 65535), metavar="N",
                   help="serve /metrics for Prometheus on port N (0 picks one); "
                   "with --processes, one endpoint for all of them")  # fmt: skip
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address for --metrics-port (default 127.0.0.1)")  # fmt: skip
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, metavar="LEVEL",
                   help="write the awa logger's records at LEVEL and above to stderr (DEBUG, "
                   "INFO, WARNING, ERROR; default: as the application configured)")  # fmt: skip
    p.add_argument("--log-format", choices=("text", "json"),
                   help="text lines or one JSON object per line (implies --log-level INFO "
                   "unless given)")  # fmt: skip
    p.add_argument("--set", dest="settings", action="append", type=setting_flag, default=[],
                   metavar="NAME=VALUE",
                   help="a keyword setting of start(), e.g. heartbeat_staleness_ms=20000 "
                   "or synchronous_commit=true (repeatable; docs/cli.md lists them)")  # fmt: skip
    p.set_defaults(handler=run, needs_db=lambda a: False)


def load_client(target: str) -> awa.AsyncClient:
    """The AsyncClient named by ``MODULE:ATTRIBUTE`` (a sync Client gives its async core)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:CLIENT, got {target!r}")
    sys.path.insert(0, "")
    for path in reversed(os.environ.get(IMPORT_PATH_VARIABLE, "").split(os.pathsep)):
        if path and path not in sys.path:  # a Django parent's project directories
            sys.path.insert(0, path)
    module = importlib.import_module(module_name)
    obj = getattr(module, attribute, None)
    if isinstance(obj, awa.Client):
        return obj.async_client
    if isinstance(obj, awa.AsyncClient):
        return obj
    raise ValueError(f"{target} is not an awa.AsyncClient or awa.Client")


def _load_client_or_embedded(target: str, url: str | None) -> awa.AsyncClient:
    """The application's client (the supervisor checks it once, before any child). One
    built without a URL when none is configured anywhere gets the embedded server, as
    every other command does (CONTRACT §1): started here, said on stderr, and named to
    the children through AWA_DATABASE_URL. A client with a URL of its own starts none."""
    try:
        return load_client(target)
    except awa.NoDatabaseUrl:
        if url is not None or configured_url(None):
            raise
    os.environ["AWA_DATABASE_URL"] = database_url(None)
    return load_client(target)  # the failed import left no module behind: import it again


def run(args: argparse.Namespace, url: str | None) -> int | Coroutine[Any, Any, int]:
    early_signals.hold()  # before the application's module: its import may take a while
    if os.getpid() == 1:
        stop_signals.say(
            "running as PID 1: processes that handlers leave orphaned are not reaped; "
            "run under an init (docker run --init, tini)"
        )
    if args.metrics_port is not None:
        require("metrics", "--metrics-port")
    if url is not None:
        # As if run with AWA_DATABASE_URL set (children inherit it): the client is built by
        # the application's module, so only a client built without a URL can follow it.
        os.environ["AWA_DATABASE_URL"] = url
    try:
        client = _load_client_or_embedded(args.target, url)
    except awa.ValidationError as exc:
        if exc.field in ("AWA_DATABASE_URL", "DATABASE_URL"):
            # the client read a malformed variable: named as such, not blamed on the
            # module (and never checked up front: an application whose own client has a
            # URL may keep DATABASE_URL for another database)
            return fail(str(exc), 2)
        return fail(f"argument MODULE:CLIENT: {exc}", 2)
    except (ImportError, ValueError) as exc:
        return fail(f"argument MODULE:CLIENT: {exc}", 2)
    if url is not None and client.database_url != awa.AsyncClient(url).database_url:
        return fail(
            f"argument --database-url: {args.target} was built with a database URL of its "
            "own; build it without one (awa.AsyncClient()) for this flag to choose it",
            2,
        )
    refusal = _configuration_refusal(client, args)  # once, before any child starts
    if refusal is not None:
        return fail(refusal, 2)
    if args.processes is None:
        return run_worker(client, args)
    return supervise(args)


def _configuration_refusal(client: awa.AsyncClient, args: argparse.Namespace) -> str | None:
    """Why ``start()`` would refuse the queues the flags give, naming the flag; None when
    it would not."""
    mismatch = _mode_mismatch(args.queues, weighted=args.global_max_workers is not None)
    if mismatch is not None:
        return f"argument --queue: {mismatch}"
    try:
        build_worker_config(
            _queue_configs(args.queues) or client.registry.queues(),
            global_max_workers=args.global_max_workers,
            **_settings(args.settings),
        )
    except BuildError as exc:
        if exc.field.startswith("queues") and args.queues:
            return f"argument --queue: {exc}"
        if exc.field in START_SETTINGS and args.settings:
            return f"argument --set: {exc}"
        if exc.field == "global_max_workers" or isinstance(exc, MinWorkersExceedGlobal):
            return f"argument --global-max-workers: {exc.reason}"
        return str(exc)
    return None


def _mode_mismatch(flags: list[QueueFlag], *, weighted: bool) -> str | None:
    """Why a ``--queue`` gives a setting its mode does not use (None: none does). Taken
    silently, ``email=10`` beside ``--global-max-workers`` would look like a cap on email
    and be no cap at all."""
    for flag in flags:
        if weighted and flag.max_workers is not None:
            return (
                f"{flag.text!r} sets max_workers, which weighted mode (--global-max-workers) "
                f"does not use: give the queue's share as {flag.name}:min=N,weight=N"
            )
        if not weighted and flag.max_workers is None:
            return (
                f"expected NAME=N, got {flag.text!r} ({WEIGHTED_FORM} gives a share of "
                f"--global-max-workers, weighted mode); give the queue's cap as {flag.name}=N"
            )
    return None


def _queue_configs(flags: list[QueueFlag]) -> list[dict[str, Any]]:
    return [flag.config() for flag in flags]


def _settings(flags: list[SettingFlag]) -> StartSettings:
    """The ``--set`` flags as ``start()`` keywords (a setting given twice: the last); each
    name is one of START_SETTINGS and each value of its kind, as the flag's parser checked."""
    return cast(StartSettings, {flag.name: flag.value for flag in flags})


def child_command(args: argparse.Namespace) -> list[str]:
    """The ``awa`` arguments of one supervised worker: this command without --processes,
    serving its metrics (if asked) on a loopback port of its own for the supervisor."""
    command = ["worker", args.target, "--shutdown-timeout-ms", str(args.shutdown_timeout_ms)]
    for flag in args.queues:
        command += ["--queue", flag.text]
    if args.global_max_workers is not None:
        command += ["--global-max-workers", str(args.global_max_workers)]
    if args.max_connections is not None:
        command += ["--max-connections", str(args.max_connections)]
    for setting in args.settings:
        command += ["--set", setting.text]
    if args.log_level is not None:
        command += ["--log-level", args.log_level]
    if args.log_format is not None:
        command += ["--log-format", args.log_format]
    if args.metrics_port is not None:
        command += ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
    return command


def supervise(args: argparse.Namespace) -> int:
    if args.listen_url:  # to the children through the environment: not in their argv
        os.environ["AWA_LISTEN_URL"] = args.listen_url
    supervisor = Supervisor(
        child_command(args), args.processes, shutdown_timeout_s=args.shutdown_timeout_ms / 1000
    )
    server = None
    if args.metrics_port is not None:
        from awa.metrics.http import MetricsServer
        from awa.metrics.supervised import FleetMetrics

        fleet = FleetMetrics(lambda: supervisor.children)
        try:
            server = MetricsServer(fleet, port=args.metrics_port, host=args.metrics_host).start()
        except OSError as exc:
            return _cannot_serve_metrics(args, exc)
        stop_signals.say(f"metrics of all worker processes on {server.url}")
    # The standard event loop, whatever policy the application's module set when the check
    # above imported it (uvloop cannot start a child in a process group of its own). The
    # supervisor runs none of the application's code; its children keep their policy.
    asyncio.set_event_loop_policy(None)
    try:
        return asyncio.run(supervisor.run())
    finally:
        if server is not None:
            server.stop()


def _cannot_serve_metrics(args: argparse.Namespace, exc: OSError) -> int:
    """Exit 2 naming the flag at fault: the host when it does not resolve, else the port."""
    if isinstance(exc, socket.gaierror):
        return fail(f"argument --metrics-host: cannot resolve {args.metrics_host!r}: {exc}", 2)
    return fail(f"argument --metrics-port: cannot listen: {exc}", 2)


def _configure_logging(args: argparse.Namespace) -> None:
    """Write the awa logger's records to stderr as the flags ask: after the application's
    module was imported, so the flags win over what it set (its own handlers stay)."""
    if args.log_level is None and args.log_format is None:
        return
    awa.log.configure(json=args.log_format == "json", level=args.log_level or "INFO")


async def run_worker(client: awa.AsyncClient, args: argparse.Namespace) -> int:
    _configure_logging(args)
    stop = asyncio.Event()
    link = ChildLink.from_environ()  # set when a supervisor started this process
    loop = asyncio.get_running_loop()
    with stop_signals.handled(loop, stop, args.shutdown_timeout_ms, supervised=link is not None):
        return await _serve(client, args, stop, link)


async def _serve(
    client: awa.AsyncClient, args: argparse.Namespace, stop: asyncio.Event, link: ChildLink | None
) -> int:
    if link is not None:

        def supervisor_gone() -> None:
            if not stop.is_set():
                stop_signals.say("the supervisor is gone: shutting down")
            stop.set()

        await link.open(on_supervisor_gone=supervisor_gone)
    if args.max_connections is not None:
        client.max_connections = args.max_connections
    if args.listen_url:
        client.listen_url = args.listen_url
    metrics_server = None
    if args.metrics_port is not None:
        from awa import metrics

        try:
            metrics_server = metrics.serve(client, port=args.metrics_port, host=args.metrics_host)
        except OSError as exc:
            return _cannot_serve_metrics(args, exc)
        if link is None:
            stop_signals.say(f"metrics on {metrics_server.url}")
    await client.start(
        _queue_configs(args.queues) or None,
        global_max_workers=args.global_max_workers,
        **_settings(args.settings),
    )
    queues = ", ".join(client.runtime_snapshot().queues)
    stops = "SIGTERM stops" if link is not None else "Ctrl-C stops"  # not its terminal's
    if not stop.is_set():  # (a stop that came during start() was said already)
        # Said whatever stderr has become: a supervised child restarted after its
        # terminal hung up raised here and was restarted again for ever (a review).
        stop_signals.say(f"worker running ({queues}); {stops}")
    if link is not None:
        link.ready(
            instance_id=client.runtime_snapshot().instance_id,
            metrics_url=metrics_server.url if metrics_server is not None else None,
        )
    status = 0
    try:
        if await _first_of(stop.wait(), client.wait_stopped()) == 1 and not stop.is_set():
            stop_signals.say(
                "the worker stopped without being asked (the application shut its client "
                "down): exiting with status 1"
            )
            status = 1  # so a supervisor (awa's, systemd, Kubernetes) starts another
    finally:
        await client.shutdown(timeout_ms=args.shutdown_timeout_ms)
        await client.close()
        if metrics_server is not None:
            metrics_server.stop()
        if link is not None:
            await link.close()
    return status


async def _first_of(*waits: Coroutine[Any, Any, Any]) -> int:
    """Wait until one of ``waits`` ends; return its index (the others are cancelled)."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    return min(tasks.index(task) for task in done)
