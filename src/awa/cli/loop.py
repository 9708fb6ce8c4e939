"""The event loop of one ``awa`` command: uvloop when installed, and an exit that cannot hang.

``asyncio.run`` ends by cancelling every task left and waiting for all of them, without
limit: one job handler that swallows ``CancelledError`` then keeps ``awa worker`` alive
forever after its shutdown finished. Here the tasks left get ``EXIT_GRACE_S`` to end
after their cancellation; the process then exits without them (the worker's shutdown
has already fenced their jobs and named them in a warning). Threads are the same story
one level down: a handler's ``asyncio.to_thread`` call (the loop's default executor) or
its own non-daemon thread still running made the interpreter wait for it at exit, an hour
for an hour-long call; those get ``EXIT_GRACE_S`` as well (:func:`leave_stray_threads`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Coroutine
from types import FrameType
from typing import Any

from awa.cli.stop_signals import exit_now, stop_signals

EXIT_GRACE_S = 2.0  # (awa.worker.shutdown.FENCE_HOLD_S counts on it: test_stop_signals)
logger = logging.getLogger("awa")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's when it is installed (``awa[uvloop]``) unless ``AWA_EVENT_LOOP=asyncio``."""
    if os.environ.get("AWA_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    """Run the command's coroutine to its exit status."""
    loop = _loop_factory()()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.wait(tasks, timeout=EXIT_GRACE_S))
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {"message": "unhandled exception in a task at exit", "task": task,
                 "exception": task.exception()}
            )  # fmt: skip


def _exit_now(signum: int, frame: FrameType | None) -> None:
    exit_now(signum, f"{signal.Signals(signum).name}: exiting now")


def leave_stray_threads(before: Collection[threading.Thread], status: int) -> None:
    """For the ``awa`` command's own process (never an application that calls ``main()``:
    its threads are its own). Return when every non-daemon thread started since
    ``before`` has ended within ``EXIT_GRACE_S``; otherwise name them and exit the process
    now with ``status``:
    the interpreter would wait for each at exit, without limit. (Closing the loop told
    its idle ``to_thread`` threads to end; ``shutdown_default_executor`` would wait for
    the busy ones, without limit before Python 3.12.)"""
    # The loop is closed (asyncio's close put the default handlers back): a signal now
    # would raise KeyboardInterrupt out of this wait, and the interpreter then waited
    # for the threads without limit (a review). It exits at once instead.
    if threading.current_thread() is threading.main_thread():
        for sig in stop_signals():
            signal.signal(sig, _exit_now)
    deadline = time.monotonic() + EXIT_GRACE_S
    stray = [t for t in threading.enumerate() if t not in before and not t.daemon]
    for thread in stray:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in stray if t.is_alive()]
    if not left:
        return
    logger.warning(
        "awa: %d thread(s) started while the command ran still run (%s) — a handler's "
        "asyncio.to_thread call or its own thread; exiting without them",
        len(left), ", ".join(left),
        extra={"event": "threads_left", "threads": left},
    )  # fmt: skip
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
