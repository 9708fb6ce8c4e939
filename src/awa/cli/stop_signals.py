"""The stop signals of ``awa worker``: the first drains, a second exits at once.

Handled at the interpreter's level, not the event loop's (``loop.add_signal_handler``
runs a handler only once the loop gets control back): an ``async def`` handler blocking
the loop (``time.sleep`` where ``asyncio.sleep`` was meant) made the worker deaf to every
signal but SIGKILL — a second SIGTERM exited only when the blocking call returned (a
review). Python runs these handlers in the main thread between two bytecodes, even while
the loop is blocked there; the first one hands the stop to the loop thread-safely, a
second one exits the process.

SIGHUP (the terminal hung up) stops the worker as SIGTERM does, unless it is ignored
(``nohup``): it used to kill the process on the spot, its jobs left ``running`` until
their heartbeats went stale.

One event can deliver the same signal twice: a terminal's hang-up reaches a foreground
job from its shell and from the kernel, and ``timeout`` signals the command and then its
process group. A SIGTERM or SIGHUP within :data:`REPEAT_WINDOW_S` of the first stop signal
is that event's copy, not a second signal (a review: a closed terminal killed the handlers
of two runs in three). SIGINT is a person's key: a second press always counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Literal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REPEAT_WINDOW_S = 1.0
_SENT_TWICE_BY_ONE_EVENT = frozenset({signal.SIGTERM, signal.SIGHUP})


class StopCount:
    """The stop signals a process received: the first stops it; a later one is a second
    signal unless it is a copy of the first event (a SIGTERM or SIGHUP within
    :data:`REPEAT_WINDOW_S` of the first)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._first_at: float | None = None

    def receive(self, sig: int) -> Literal["first", "copy", "again"]:
        now = self._clock()
        if self._first_at is None:
            self._first_at = now
            return "first"
        if sig in _SENT_TWICE_BY_ONE_EVENT and now - self._first_at < REPEAT_WINDOW_S:
            return "copy"
        return "again"


def copy_note(name: str) -> str:
    """What a process says of a copy of its first stop signal."""
    return f"{name} again within {REPEAT_WINDOW_S:g} s: the same stop"


def stop_signals() -> list[signal.Signals]:
    """:data:`STOP_SIGNALS`, SIGHUP left out when this process ignores it (``nohup``)."""
    hangup_ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    return [sig for sig in STOP_SIGNALS if not (sig is signal.SIGHUP and hangup_ignored)]


def exit_now(signum: int, text: str) -> None:
    """Say ``text`` and exit with 128 + ``signum``, at once (nothing is waited for)."""
    say(text)
    os._exit(128 + signum)


def say(text: str) -> None:
    """One line on stderr, written whole (``os.write``: a signal handler may run while
    the main thread is inside a buffered write to ``sys.stderr``); none when it is closed,
    a hung-up terminal (EIO) or a pipe whose reader is gone (EPIPE): the note never
    stands in the way of what it tells of."""
    with contextlib.suppress(OSError):
        os.write(2, f"awa: {text}\n".encode())


@contextmanager
def handled(
    loop: asyncio.AbstractEventLoop,
    stop: asyncio.Event,
    timeout_ms: int,
    *,
    supervised: bool = False,
) -> Iterator[None]:
    """Within the block: the first stop signal sets ``stop`` (on ``loop``); a second one
    exits with 128 + its number — unless a supervisor runs this process: it forwards its
    own SIGTERM, so a child that a service manager also signals (systemd's
    KillMode=control-group signals every process of the unit) gets two, and it is the
    supervisor that kills on a second signal.

    The handlers stay after the block, until the loop closes (which puts the defaults
    back): a second signal while the exit waits for tasks and threads left running still
    exits at once. An application that called ``main()`` gets its own back from there.
    """
    count = StopCount()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received = count.receive(signum)
        name = signal.Signals(signum).name
        if received == "first":
            again = (
                "the supervisor's second signal kills" if supervised else "a second signal exits"
            )
            say(f"{name}: shutting down (running jobs get {timeout_ms} ms); {again} at once")
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing to stop
                loop.call_soon_threadsafe(stop.set)
        elif received == "copy":
            say(copy_note(name))
        elif supervised:
            say(f"{name} again: already shutting down")
        else:
            exit_now(
                signum,
                f"{name} again: exiting now; jobs still running here are returned by the "
                "rescuer once their heartbeats are stale",
            )

    for sig in stop_signals():
        # The loop's own handler only wakes the loop (a loop idle in epoll runs no
        # Python until an event: two signals then came in as one, a second SIGTERM
        # lost); the interpreter-level handler set over it does the counting.
        loop.add_signal_handler(sig, _woken)
        signal.signal(sig, on_signal)
    yield


def _woken() -> None:
    """The loop read a signal off its wakeup pipe: ``on_signal`` has run or runs next."""
