"""The event loop of one ``awa`` command: uvloop when installed, and an exit that cannot hang.

``asyncio.run`` ends by cancelling every task left and waiting for all of them, without
limit: one job handler that swallows ``CancelledError`` then keeps ``awa worker`` alive
forever after its shutdown finished. Here the tasks left get ``EXIT_GRACE_S`` to end
after their cancellation; the process then exits without them (the worker's shutdown
has already fenced their jobs and named them in a warning).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

EXIT_GRACE_S = 2.0


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
