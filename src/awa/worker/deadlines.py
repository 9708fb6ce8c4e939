"""One deadline timer for every running attempt, instead of one timer per job.

A worker's attempts carry deadlines that are nearly always far away (5 min by default)
and that almost never pass. Arming and cancelling an event-loop timer for each job cost
a few microseconds on the hot path; this watcher sleeps until the nearest deadline among
the attempts in flight (re-checked when a launch brings an earlier one) and expires those
whose time has come. An attempt asked to stop is due again ``ABANDON_AFTER_S`` later
(:mod:`awa.worker.abandon`): the same watcher gives up on handlers that did not stop.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from awa.service import LoopService


class Deadlined(Protocol):
    """What the watcher needs of an attempt."""

    @property
    def due(self) -> float | None:
        """``time.monotonic()`` when it is next due, None for never."""


class DeadlineWatch(LoopService):
    """Expires attempts whose ``due`` time has passed."""

    def __init__(
        self,
        attempts: Callable[[], Iterable[Deadlined]],
        expire: Callable[[Deadlined], None],
    ) -> None:
        super().__init__("deadlines")
        self._attempts = attempts  # the attempts in flight, asked afresh each look
        self._expire = expire
        self._wakeup = asyncio.Event()
        self._next = math.inf

    def _on_stop(self) -> None:
        self._wakeup.set()

    def noticed(self, due: float) -> None:
        """A new attempt is due at ``due``: look again now if that is the nearest."""
        if due < self._next:
            self._next = due
            self._wakeup.set()

    async def _run(self) -> None:
        while not self.stopping:
            now = time.monotonic()
            nearest = math.inf
            for attempt in list(self._attempts()):
                due = attempt.due
                if due is None:
                    continue
                if due <= now:
                    self._expire(attempt)  # may make it due again later (abandonment)
                    due = attempt.due
                    if due is None or due <= now:
                        continue
                if due < nearest:
                    nearest = due
            self._next = nearest
            self._wakeup.clear()
            if nearest == math.inf:
                await self._wakeup.wait()
                continue
            try:
                async with asyncio.timeout(nearest - time.monotonic()):
                    await self._wakeup.wait()
            except TimeoutError:
                pass
