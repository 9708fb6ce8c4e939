"""The common lifecycle of background services: ``start``/``stop``, idempotent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger("awa")


async def cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again if need be.

    A cancellation can be lost: on Python 3.11, ``asyncio.wait_for`` (which psycopg_pool
    uses while a caller waits for a connection) drops a ``CancelledError`` that arrives
    together with the connection, and the task goes on as if nothing happened. A plain
    ``cancel(); await task`` then hangs forever — after a database restart the leader,
    stepping down, hung this way, and maintenance (rescues) never came back.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.1)


class Periodic:
    """Runs ``tick`` every ``interval_s`` seconds until stopped; errors are logged, not fatal.

    ``kick()`` runs the next tick at once. ``ticks`` and ``last_ok`` let tests and health
    checks observe progress without sleeping.
    """

    def __init__(self, name: str, interval_s: float, tick: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self.ticks = 0
        self.failures = 0
        self.last_ok = True

    def start(self) -> None:
        """Start ticking. Idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"awa-{self.name}")

    async def stop(self) -> None:
        """Stop ticking and wait for the current tick to end. Idempotent.

        The loop also checks that it is still the current task, so it ends even when
        its cancellation was lost (see :func:`cancel_and_wait`).
        """
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    @property
    def running(self) -> bool:
        """True while the service loop is alive."""
        return self._task is not None and not self._task.done()

    def kick(self) -> None:
        """Run the next tick now instead of at the end of the interval."""
        self._kick.set()

    async def _run(self) -> None:
        me = asyncio.current_task()
        while self._task is me:  # stop() clears _task: ends even if a cancel was lost
            try:
                await self._tick()
                self.last_ok = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                self.last_ok = False
                logger.warning("%s: %s", self.name, exc)
            self.ticks += 1
            if self._task is not me:
                return
            try:
                async with asyncio.timeout(self.interval_s):
                    await self._kick.wait()
            except TimeoutError:
                pass
            self._kick.clear()
