"""A private event loop in a daemon thread, so blocking code can call the async core."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from awa.errors import BlockingCallOnLoop, ClientClosed

R = TypeVar("R")


class Portal:
    """Runs coroutines on one background event loop and waits for their results."""

    def __init__(self, name: str = "awa-sync") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The background loop."""
        return self._loop

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the background loop and return its result (or raise its error)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise BlockingCallOnLoop(
                "a blocking awa.Client call was made from its own event loop (from a hook?): "
                "use the AsyncClient there"
            )
        if self._loop.is_closed():
            coro.close()
            raise ClientClosed("this client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Stop the loop and join the thread. Idempotent."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
