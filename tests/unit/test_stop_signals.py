"""The stop signals' handlers: what is put back after ``awa worker`` ran in-process."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from awa.cli import early_signals, stop_signals


@pytest.fixture
def original_handlers() -> Iterator[dict[signal.Signals, Any]]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield saved
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _run(restore: bool) -> Any:
    """Enter and leave ``handled`` on a loop that stays open; the SIGTERM handler then."""
    loop = asyncio.new_event_loop()
    try:

        async def body() -> Any:
            with stop_signals.handled(
                asyncio.get_running_loop(), asyncio.Event(), 1, restore=restore
            ):
                inside = signal.getsignal(signal.SIGTERM)
            return inside, signal.getsignal(signal.SIGTERM)

        return loop.run_until_complete(body())
    finally:
        loop.close()


def test_an_application_gets_back_the_handler_it_had_before_the_import_hold(
    original_handlers: dict[signal.Signals, Any],
) -> None:
    """`awa worker` holds SIGTERM during the application's import; after main() ran in an
    application's process, that held handler stayed: a SIGTERM then printed "before the
    worker started" and exited 0 (a review)."""
    early_signals.hold()
    inside, after = _run(restore=True)
    assert inside not in (original_handlers[signal.SIGTERM], early_signals._exit)
    assert after is original_handlers[signal.SIGTERM]


def test_the_awa_process_keeps_its_handlers_while_the_exit_waits(
    original_handlers: dict[signal.Signals, Any],
) -> None:
    """Its own process: a second signal while the exit waits for tasks and threads left
    running must still exit at once, not reach the import hold's handler."""
    early_signals.hold()
    inside, after = _run(restore=False)
    assert after is inside


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
