"""The one lifecycle of every background loop in awa: ``start()``, ``stop()``, ``alive``.

A :class:`Service` is anything with that shape; :class:`LoopService` implements it for a
loop running in one task, and :class:`Periodic` is the common case of a loop that ticks
every interval. Every stop works the same way, whatever the loop:

1. the loop is told to end (:attr:`LoopService.stopping` turns true and
   :meth:`LoopService._on_stop` wakes it);
2. it gets ``stop_grace_s`` to end by itself (0 for loops with nothing to finish);
3. then it is cancelled — again and again until it has ended, because a cancellation can
   be lost (see :func:`cancel_and_wait`).

So ``stop()`` always returns, within the grace plus however long the loop's cleanup takes
after a cancellation. ``alive`` is the one liveness name: True while the loop runs.
``healthy`` says whether its last round worked (a loop that keeps failing and retrying is
alive but not healthy).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable
from time import monotonic as _clock  # a module name of its own: tests move it
from typing import Protocol

from awa.log import fault, traceback_unless_expected

logger = logging.getLogger("awa")


class Service(Protocol):
    """A background service: start and stop are idempotent; stop always returns."""

    name: str

    def start(self) -> None: ...
    async def stop(self) -> None: ...
    @property
    def alive(self) -> bool: ...


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


class LoopService(abc.ABC):
    """A service whose work is one task running :meth:`_run` until stopped.

    Subclasses implement ``_run`` as a loop that checks :attr:`stopping` (so it also ends
    when a cancellation was lost), may override :meth:`_on_stop` to wake it, and set
    ``stop_grace_s`` when a round in progress should be allowed to finish.
    """

    stop_grace_s = 0.0

    def __init__(self, name: str) -> None:
        self.name = name
        self.healthy = True
        self._task: asyncio.Task[None] | None = None
        self._starting = False

    def start(self) -> None:
        """Start the loop. Idempotent (and starts it again after it ended)."""
        if self._task is None or self._task.done():
            # With an eager task factory (asyncio.eager_task_factory, Python 3.12+) the
            # loop's first step runs inside create_task, before _task is set: it must
            # not read that as "stopped" (every loop ended at once, silently).
            self._starting = True
            try:
                self._task = asyncio.create_task(self._run(), name=f"awa-{self.name}")
            finally:
                self._starting = False

    async def stop(self) -> None:
        """Ask the loop to end, give it ``stop_grace_s``, then cancel it. Idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        self._on_stop()
        if self.stop_grace_s > 0 and not task.done():
            await asyncio.wait([task], timeout=self.stop_grace_s)
        await cancel_and_wait(task)
        await self._after_stop()

    @property
    def alive(self) -> bool:
        """True while the loop runs."""
        return self._task is not None and not self._task.done()

    @property
    def stopping(self) -> bool:
        """True inside the loop once ``stop()`` was called for it: time to end."""
        if self._starting:  # the first step of a loop being started (eager factory)
            return False
        return self._task is None or self._task is not asyncio.current_task()

    def _on_stop(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Wake the loop so it notices :attr:`stopping` (default: nothing to wake)."""

    async def _after_stop(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Clean-up once the loop has ended (default: none)."""

    @abc.abstractmethod
    async def _run(self) -> None:
        """The loop itself; it ends once :attr:`stopping` is true."""


class Periodic(LoopService):
    """Runs ``tick`` every ``interval_s`` seconds until stopped; errors are logged, not fatal.

    ``kick()`` runs the next tick at once. ``ticks`` and ``healthy`` let tests and health
    checks observe progress without sleeping. With ``retry_s``, a failed tick is tried
    again that soon, the wait doubling up to the interval while it keeps failing. With
    ``fixed_rate``, the interval runs from each tick's start rather than its end (a tick
    slower than the interval is followed at once), so slow ticks do not space out.
    """

    def __init__(
        self,
        name: str,
        interval_s: float,
        tick: Callable[[], Awaitable[object]],
        retry_s: float | None = None,
        *,
        fixed_rate: bool = False,
    ) -> None:
        super().__init__(name)
        self.interval_s = interval_s
        self._fixed_rate = fixed_rate
        self._tick = tick
        self._kick = asyncio.Event()
        self.ticks = 0
        self.failures = 0
        self._retry_s = retry_s

    def kick(self) -> None:
        """Run the next tick now instead of at the end of the interval."""
        self._kick.set()

    async def _run(self) -> None:
        # An event of this run's loop: a service started again under another event loop
        # (an app's lifespan entered twice, as test clients do) must not wait on the old.
        kicked, self._kick = self._kick.is_set(), asyncio.Event()
        if kicked:
            self._kick.set()
        retry_s = self._retry_s
        while not self.stopping:
            wait_s = self.interval_s
            started = _clock()
            try:
                await self._tick()
                self.healthy = True
                retry_s = self._retry_s
                if self._fixed_rate:
                    wait_s = max(0.0, wait_s - (_clock() - started))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                self.healthy = False
                logger.warning(
                    "%s: %s", self.name, fault(exc), exc_info=traceback_unless_expected(exc)
                )
                if retry_s is not None:
                    wait_s, retry_s = min(retry_s, wait_s), retry_s * 2
            self.ticks += 1
            if self.stopping:
                return
            try:
                async with asyncio.timeout(wait_s):
                    await self._kick.wait()
            except TimeoutError:
                pass
            self._kick.clear()
