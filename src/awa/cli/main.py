"""Entry point of the ``awa`` command: global options, then one command group."""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

import awa
from awa.cli.args import Parser, postgres_url
from awa.cli.commands import (
    batch,
    cron,
    demo,
    dlq,
    health,
    job,
    migrate,
    pool,
    queue,
    runtime,
    serve,
    worker,
)
from awa.cli.database import database_url
from awa.cli.loop import leave_stray_threads, run_async
from awa.cli.output import fail
from awa.cli.stop_signals import STOP_SIGNALS

COMMANDS = (migrate, worker, queue, pool, job, batch, cron, dlq, runtime, health, serve, demo)


def build_parser() -> Parser:
    """The full argument parser (also used by the docs and the tests)."""
    parser = Parser(
        prog="awa",
        description="awa — a Postgres-native background job queue.",
        epilog="Database: --database-url > AWA_DATABASE_URL > DATABASE_URL > embedded "
        "server in ./.awa/pgdata.",
    )
    parser.add_argument("--database-url", type=postgres_url, metavar="URL", help="PostgreSQL URL")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--version", action="version", version=f"awa {awa.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    _add_globals_to_leaves(parser)
    return parser


def _add_globals_to_leaves(parser: argparse.ArgumentParser) -> None:
    """Every command accepts ``--json`` and ``--database-url`` after its name too
    (``awa queue stats --json``); given there, they override the global ones."""
    subactions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subactions:
        known = {flag for a in parser._actions for flag in a.option_strings}
        if "--json" not in known:
            parser.add_argument(
                "--json", action="store_true", default=argparse.SUPPRESS, help="JSON output"
            )
        if "--database-url" not in known:
            parser.add_argument(
                "--database-url",
                type=postgres_url,
                metavar="URL",
                default=argparse.SUPPRESS,
                help="PostgreSQL URL",
            )
        parser.set_defaults(leaf_parser=parser)  # whose arguments an API error may name
        return
    for action in subactions:
        for child in action.choices.values():
            _add_globals_to_leaves(child)


def _argument_for(field: str, command: argparse.ArgumentParser | None) -> str | None:
    """How the command that ran spells the API's ``field``: its flag (``--by`` for
    ``paused_by``) or its positional (``QUEUE``); None when it has no such argument."""
    flag = "--" + field.replace("_", "-")
    for action in command._actions if command is not None else ():
        if flag in action.option_strings or (action.dest == field and field != "help"):
            if action.option_strings:
                return max(action.option_strings, key=len)
            return str(action.metavar or action.dest)
    return None


def _nothing_to_check(args: argparse.Namespace) -> None:
    return None


def _reopen_closed_standard_streams() -> None:
    """Put /dev/null on stdin, stdout or stderr if started with it closed (``>&-``, some
    service managers): Python then has ``None`` for it, which a write fails on, and the
    next socket takes the free descriptor — output meant for the terminal went into the
    event loop's socket, and uvloop aborts on closing a descriptor below 3."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        opened = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
        if opened != fd:  # cannot happen with the lower ones open; never guess
            os.close(opened)
            continue
        setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115


def main(argv: Sequence[str] | None = None, *, own_process: bool | None = None) -> int:
    """Run the command line; returns the exit status. ``own_process`` (default: when
    ``argv`` is None, i.e. the ``awa`` command itself) says the process is the command's
    own: it then exits past threads a handler left running, rather than wait for them
    (:func:`awa.cli.loop.leave_stray_threads`); an application calling ``main(argv)``
    keeps its threads."""
    _reopen_closed_standard_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    args.own_process = own_process if own_process is not None else argv is None
    if args.own_process:
        return _run(args)
    # An application's process goes on: the signal handlers a command set (`awa worker`
    # holds SIGTERM from before the import to its loop's close) are its own again after.
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        return _run(args)
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _run(args: argparse.Namespace) -> int:
    needs_db = getattr(args, "needs_db", lambda a: True)(args)
    # The pool's own retry warnings would add lines to the one-line errors; an
    # application that configures logging still gets them.
    logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
    try:
        # What a command can refuse without the database, refused before one is found
        # (or the embedded server started): one line, nothing started or written.
        getattr(args, "check", _nothing_to_check)(args)
        url = database_url(args.database_url) if needs_db else args.database_url
        # A command returns a coroutine to run on the event loop, or (the supervisor,
        # which picks its own loop) its exit status.
        threads = set(threading.enumerate())
        outcome = args.handler(args, url)
        status: int = run_async(outcome) if inspect.iscoroutine(outcome) else outcome
        sys.stdout.flush()  # here, where a reader that left is caught, not at exit
        if args.own_process:
            leave_stray_threads(threads, status)
    except awa.ValidationError as exc:
        argument = _argument_for(exc.field, getattr(args, "leaf_parser", None))
        if argument is not None:  # the API's field is one of this command's arguments
            return fail(f"argument {argument}: {exc.reason}", 2)
        return fail(str(exc), 2)
    except awa.MissingExtra as exc:
        return fail(str(exc), 2)
    except awa.AwaError as exc:
        return fail(str(exc), 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `awa job list | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE
    return status


if __name__ == "__main__":
    sys.exit(main())
