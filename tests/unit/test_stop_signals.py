"""The stop signals' handlers: what is put back after ``awa worker`` ran in-process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from awa.cli import early_signals, stop_signals
from awa.cli.main import main
from tests.helpers import CHILD_PYTHONPATH


@pytest.fixture
def original_handlers() -> Iterator[dict[signal.Signals, Any]]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield saved
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_an_application_gets_its_handlers_back_after_main(
    original_handlers: dict[signal.Signals, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`awa worker` holds SIGTERM from before the application's import; after main() ran
    in an application's process — a worker that failed to start, a supervisor — the held
    handler (or SIG_DFL) stayed, and a later SIGTERM printed "before the worker started"
    and exited 0 (two reviews)."""

    def mine(signum: int, frame: Any) -> None:
        return None

    signal.signal(signal.SIGTERM, mine)
    assert main(["worker", "no_such_module_anywhere:client"]) != 0
    assert signal.getsignal(signal.SIGTERM) is mine
    capsys.readouterr()


def test_the_handlers_stay_after_the_block_until_the_loop_closes(
    original_handlers: dict[signal.Signals, Any],
) -> None:
    """The awa process's own: a second signal while the exit waits for tasks and threads
    left running must still exit at once, not reach the import hold's handler."""
    early_signals.hold()
    loop = asyncio.new_event_loop()
    try:

        async def body() -> tuple[Any, Any]:
            with stop_signals.handled(asyncio.get_running_loop(), asyncio.Event(), 1):
                inside = signal.getsignal(signal.SIGTERM)
            return inside, signal.getsignal(signal.SIGTERM)

        inside, after = loop.run_until_complete(body())
    finally:
        loop.close()
    assert inside is not early_signals._exit and after is inside


def test_a_hangup_ignored_by_nohup_stays_ignored(
    original_handlers: dict[signal.Signals, Any],
) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    assert signal.SIGHUP not in stop_signals.stop_signals()
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert signal.SIGHUP in stop_signals.stop_signals()


def test_the_fence_hold_outlasts_the_clis_exit_waits() -> None:
    from awa.cli.loop import EXIT_GRACE_S
    from awa.worker.shutdown import CLI_EXIT_WAIT_S

    assert CLI_EXIT_WAIT_S == 2 * EXIT_GRACE_S


EXIT_WAIT = """
import os, signal, sys, threading, time
from awa.cli import loop
threading.Thread(target=time.sleep, args=(60,)).start()  # a handler's stray thread

def interrupt():
    while signal.getsignal(signal.SIGINT) is not loop._exit_now:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
loop.leave_stray_threads(set(), 7)
"""


def test_a_signal_while_the_exit_waits_for_stray_threads_exits_at_once() -> None:
    """With asyncio's loop closed, its default handlers were back: a SIGINT raised
    KeyboardInterrupt out of the wait, and the interpreter then waited for the thread
    without limit (a review: 25 s)."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WAIT],
        env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 128 + signal.SIGINT.value, done.stderr
    assert "SIGINT: exiting now" in done.stderr


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_copy_of_the_first_signal_within_the_window_is_the_same_stop(
    sig: signal.Signals,
) -> None:
    """One event delivers SIGTERM (``timeout``) or SIGHUP (a hang-up) twice."""
    clock = _Clock()
    count = stop_signals.StopCount(clock)
    assert count.receive(sig) == "first"
    clock.now += stop_signals.REPEAT_WINDOW_S / 2
    assert count.receive(sig) == "copy"
    assert count.receive(signal.SIGTERM) == "copy"  # either kind, as one stop
    clock.now += stop_signals.REPEAT_WINDOW_S
    assert count.receive(sig) == "again"


def test_a_second_sigint_always_counts() -> None:
    """Ctrl-C pressed twice is a person asking to exit now, however quick the presses."""
    count = stop_signals.StopCount(_Clock())
    assert count.receive(signal.SIGTERM) == "first"
    assert count.receive(signal.SIGINT) == "again"
