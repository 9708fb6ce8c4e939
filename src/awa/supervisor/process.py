"""The supervisor of ``awa worker --processes N``: N worker processes under one parent.

The parent runs no worker and opens no database connection. It starts each child as
``python -m awa worker …`` (the same command without ``--processes``) in a process group
of its own, so that a Ctrl-C reaches the supervisor only and shutdown happens in one
order. Each child holds one end of a socket pair (:mod:`awa.supervisor.link`): it says
there when its worker runs, and it shuts itself down when the supervisor's end closes.

- A child that exits while nothing asked it to is restarted, and the supervisor says so
  on stderr. The delay doubles with each quick failure in a row (0.5 s, 1 s, 2 s … 30 s)
  and starts again at 0.5 s once a child has run for ``STABLE_S``.
- A child that fails before any worker of the fleet ever ran is a configuration error
  (bad queue, unreachable database), not a crash: the others are stopped and the
  supervisor exits with the child's status, as a single worker would.
- SIGTERM or SIGINT: every child gets SIGTERM and drains within its own shutdown
  timeout; the supervisor exits 0 when every child did. A child still starting (its
  worker not yet running, so holding no job) exits 0 on that SIGTERM (or dies of it, if
  it comes before ``awa worker`` handles it: awa.cli.early_signals), a clean stop too. A
  second signal kills them; a SIGTERM or SIGHUP within a second of the first is that
  event's copy (:class:`awa.cli.stop_signals.StopCount`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from awa.cli.stop_signals import StopCount, copy_note, say, stop_signals
from awa.supervisor.link import LINK_ENV, parse_message

RESTART_MIN_S = 0.5
RESTART_MAX_S = 30.0
STABLE_S = 30.0
KILL_GRACE_S = 30.0  # beyond the children's own shutdown timeout, before SIGKILL


def restart_delay(quick_failures: int) -> float:
    """Seconds to wait before a restart, after ``quick_failures`` deaths in a row of
    children that ran less than ``STABLE_S`` (``RESTART_MIN_S`` after a stable run)."""
    return min(RESTART_MAX_S, RESTART_MIN_S * 2.0 ** max(0, quick_failures - 1))


def describe_exit(returncode: int) -> str:
    """``exited with status 1`` or ``was killed by SIGKILL``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


@dataclass
class Child:
    """One of the N places of the fleet; its process changes with every restart."""

    index: int
    pid: int | None = None
    instance_id: str | None = None
    metrics_url: str | None = None
    ready: bool = False  # the current process runs its worker
    ever_ready: bool = False
    restarts: int = 0
    quick_failures: int = 0
    returncode: int | None = None
    process: asyncio.subprocess.Process | None = None
    ran_worker: bool = False  # the last process reported ready before it exited
    restart_pending: bool = False  # exited (reported then) and waits out its restart delay

    def stopped_cleanly(self) -> bool:
        """Exited 0, was stopped by the supervisor's SIGTERM before its worker ran, or was
        not running when the stop came (its earlier exit was reported when it happened:
        whether a stop fails must not depend on landing inside a restart delay)."""
        return (
            self.restart_pending
            or self.returncode == 0
            or (self.returncode == -signal.SIGTERM and not self.ran_worker)
        )


class Supervisor:
    """Keeps ``processes`` children of ``python -m awa COMMAND…`` running until a signal."""

    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        *,
        shutdown_timeout_s: float,
        note: Callable[[str], None] = say,
    ) -> None:
        self.command = list(command)
        self.children = [Child(i) for i in range(processes)]
        self.shutdown_timeout_s = shutdown_timeout_s
        self._note = note
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._signals = StopCount()
        self._fatal: int | None = None

    async def run(self) -> int:
        """Start every child, keep them running, and return the exit status."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in stop_signals():  # SIGHUP too: it killed the supervisor on the spot
            loop.add_signal_handler(sig, self._on_signal, sig)
        count = len(self.children)
        self._note(
            f"supervisor (pid {os.getpid()}) starting {count} worker "
            f"process{'es' if count > 1 else ''}"
        )
        keepers = [asyncio.create_task(self._keep(child)) for child in self.children]
        try:
            await self._stop.wait()
            self._stopping = True
            for child in self.children:
                _signal(child, signal.SIGTERM)
            _, late = await asyncio.wait(keepers, timeout=self.shutdown_timeout_s + KILL_GRACE_S)
            if late:
                self._note(f"{len(late)} worker process(es) did not stop in time; killing them")
                self._kill_all()
                await asyncio.wait(late)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        if self._fatal is not None:
            return self._fatal
        statuses = ["not running" if c.restart_pending else c.returncode for c in self.children]
        self._note(f"all worker processes stopped (exit statuses {statuses})")
        return 0 if all(child.stopped_cleanly() for child in self.children) else 1

    def _on_signal(self, sig: signal.Signals) -> None:
        assert self._stop is not None
        received = self._signals.receive(sig)
        if received == "first":
            self._stop.set()  # first: nothing a note meets can lose the stop
            self._note(f"{sig.name}: stopping {len(self.children)} worker processes")
        elif received == "copy":
            self._note(copy_note(sig.name))
        else:
            self._note(f"{sig.name} again: killing the worker processes")
            self._kill_all()

    def _kill_all(self) -> None:
        for child in self.children:
            _signal(child, signal.SIGKILL)

    async def _keep(self, child: Child) -> None:
        """Run the child's process again and again until the fleet stops."""
        assert self._stop is not None
        while not self._stopping:
            started = time.monotonic()
            try:
                status = await self._run_once(child)
            except Exception as exc:  # could not even start (fork refused, fds exhausted)
                self._note(f"process {child.index} could not start: {exc!r}")
                status = 1
            if self._stopping:
                return
            if not any(c.ever_ready for c in self.children):
                self._note(f"process {child.index} {describe_exit(status)} before any worker ran")
                self._fatal = status if status > 0 else 1
                self._stop.set()
                return
            stable = time.monotonic() - started >= STABLE_S
            child.quick_failures = 0 if stable else child.quick_failures + 1
            delay = restart_delay(child.quick_failures)
            self._note(
                f"process {child.index} (pid {child.pid}) {describe_exit(status)}; "
                f"restarting it in {delay:.1f} s"
            )
            child.restart_pending = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if not self._stopping:
                child.restarts += 1
                child.restart_pending = False

    async def _run_once(self, child: Child) -> int:
        """Start one process for ``child``, follow its messages, return its exit status."""
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "awa", *self.command,
                pass_fds=(theirs.fileno(),),
                env={**os.environ, LINK_ENV: str(theirs.fileno())},
                process_group=0,  # a terminal's Ctrl-C reaches the supervisor only
            )  # fmt: skip
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        child.process, child.pid, child.returncode = process, process.pid, None
        if self._stopping:  # a signal came while it was starting
            _signal(child, signal.SIGTERM)
        reader, writer = await asyncio.open_connection(sock=ours)
        listening = asyncio.create_task(self._listen(child, reader))
        try:
            child.returncode = await process.wait()
        finally:
            child.ran_worker = child.ready
            child.ready, child.metrics_url = False, None
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening
            writer.close()
        return child.returncode

    async def _listen(self, child: Child, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            message = parse_message(line)
            if message is None or message.get("event") != "ready":
                continue
            child.metrics_url = message.get("metrics_url")
            child.instance_id = message.get("instance_id")
            child.ready = True
            what = "restarted" if child.ever_ready else "running"
            child.ever_ready = True
            self._note(f"process {child.index} {what} (pid {child.pid})")


def _signal(child: Child, sig: signal.Signals) -> None:
    process = child.process
    if process is not None and process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
