"""``manage.py awa_worker [--queue NAME=N ...] [...]``: ``awa worker`` for this project.

Every flag is ``awa worker``'s (``--help`` lists them); the client is the project's
(:func:`awa.contrib.django.get_client`), with the tasks of every app's tasks module.
Without ``--queue``, the queues of ``AWA['QUEUES']`` run, else those the tasks name.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError

TARGET = "awa.contrib.django.worker:client"


def awa_argv(argv: Sequence[str]) -> list[str]:
    """The ``awa`` command line for ``manage.py awa_worker ARGV``."""
    from awa.cli.main import build_parser
    from awa.contrib.django import conf

    command = ["worker", TARGET, *argv]
    try:  # read as awa worker reads it (abbreviated flags included), quietly
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            given = build_parser().parse_args(command)
    except SystemExit:  # --help, or a bad flag: awa worker says so itself, once
        return command
    extra: list[str] = []
    if not given.queues:
        # AWA["QUEUES"] gives each queue's max_workers, which weighted mode does not use:
        # there each queue joins the shared pool with the defaults (min 0, weight 1).
        weighted = given.global_max_workers is not None
        for name, workers in conf.current().queues.items():
            extra += ["--queue", name if weighted else f"{name}={workers}"]
    return [*command, *extra]


# Django's own options, which manage.py has already applied before calling the command.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


def without_django_options(argv: Sequence[str]) -> list[str]:
    """``argv`` less ``--settings``/``--pythonpath`` (with their values): Django applied
    them already, and ``awa worker``'s parser would refuse them."""
    kept: list[str] = []
    value_next = False
    for arg in argv:
        name, equals, _ = arg.partition("=")
        if value_next:
            value_next = False
        elif name in _DJANGO_OPTIONS:
            value_next = not equals  # "--settings X": X is its value
        else:
            kept.append(arg)
    return kept


def _hand_on_import_path() -> None:
    """``--processes`` children start as ``python -m awa worker``, whose import path holds
    only their working directory: without manage.py's own directory and ``--pythonpath``
    they could not import the project's settings when run from elsewhere (a systemd
    unit). Those directories — the path entries outside the interpreter's own prefixes —
    go to them in a variable only ``awa worker`` reads: a PYTHONPATH would reach every
    program a handler starts, another interpreter's included."""
    from awa.cli.commands.worker import IMPORT_PATH_VARIABLE

    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    full = [os.path.abspath(path) for path in sys.path if path]  # "--pythonpath ." too
    own = [path for path in full if not any(_under(path, prefix) for prefix in prefixes)]
    os.environ[IMPORT_PATH_VARIABLE] = os.pathsep.join(dict.fromkeys(own))


def _under(path: str, prefix: str) -> bool:
    try:
        return os.path.commonpath([path, os.path.abspath(prefix)]) == os.path.abspath(prefix)
    except ValueError:  # another drive (Windows)
        return False


def run(argv: Sequence[str], *, own_process: bool = False) -> int:
    """Run ``awa worker`` with the project's client; returns its exit status
    (``own_process``: ``manage.py awa_worker`` itself, not ``call_command``)."""
    from awa.cli.main import main

    if "-h" in argv or "--help" in argv:
        sys.stdout.write(
            f"manage.py awa_worker takes the flags of `awa worker` below; MODULE:CLIENT is\n"
            f"this project's client ({TARGET}).\n\n"
        )
        sys.stdout.flush()
    _hand_on_import_path()  # whatever the flags say (--proc abbreviates --processes)
    try:
        return main(awa_argv(argv), own_process=own_process)
    except SystemExit as exc:  # argparse: bad flags (2) or --help (0)
        return exc.code if isinstance(exc.code, int) else 2


class Command(BaseCommand):
    """Django's face of ``awa worker``."""

    help = "Run an awa worker for this project's tasks (flags as `awa worker`; try --help)."

    def run_from_argv(self, argv: list[str]) -> None:
        # awa's own parser reads the flags, so they stay those of `awa worker` exactly.
        sys.exit(run(without_django_options(argv[2:]), own_process=True))

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("awa_args", nargs="*", help="flags of `awa worker`")

    def handle(self, *args: Any, **options: Any) -> None:
        status = run([*args, *options.get("awa_args", [])])
        if status:
            raise CommandError(f"awa worker exited with status {status}", returncode=status)
