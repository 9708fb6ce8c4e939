"""Recent history for the charts: ``queue_stats()`` sampled on an interval, kept in memory.

The dashboard process samples every ``interval_s`` seconds and keeps ``keep_s`` seconds
of samples, so the charts cover the last minutes since the dashboard started. Nothing is
written to the database.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass

import awa

logger = logging.getLogger("awa.dashboard")


@dataclass(frozen=True, slots=True)
class QueuePoint:
    """One queue's counters at one sample."""

    completed: int
    running: int
    available: int


@dataclass(frozen=True, slots=True)
class Sample:
    """Every queue's counters at one moment (``at`` is ``time.time()``)."""

    at: float
    queues: dict[str, QueuePoint]


class Sampler:
    """Samples ``queue_stats()`` in the background; ``start``/``stop`` are idempotent."""

    def __init__(self, client: awa.AsyncClient, interval_s: float = 5.0, keep_s: float = 900.0):
        self.client = client
        self.interval_s = interval_s
        self._samples: collections.deque[Sample] = collections.deque(
            maxlen=max(2, int(keep_s / interval_s) + 1)
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling in the running event loop."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="awa-dashboard-sampler")

    async def stop(self) -> None:
        """Stop sampling and wait for the loop to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def sample_once(self) -> Sample:
        """Take one sample now and keep it."""
        stats = await self.client.queue_stats()
        sample = Sample(
            time.time(),
            {s.queue: QueuePoint(s.completed, s.running, s.available) for s in stats},
        )
        self._samples.append(sample)
        return sample

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except Exception as exc:  # the database may come back: log and keep sampling
                logger.warning("dashboard sampler: %s", exc)
            await asyncio.sleep(self.interval_s)

    def samples(self) -> list[Sample]:
        """Every kept sample, oldest first."""
        return list(self._samples)

    def throughput_per_minute(self, queue: str, window_s: float = 60.0) -> float | None:
        """Completions per minute over about the last ``window_s`` seconds (None: too early)."""
        points = [(s.at, s.queues[queue]) for s in self._samples if queue in s.queues]
        if len(points) < 2:
            return None
        newest_at, newest = points[-1]
        oldest_at, oldest = points[0]
        for at, point in points:
            if newest_at - at <= window_s:
                oldest_at, oldest = at, point
                break
        if newest_at <= oldest_at:
            return None
        return max(0, newest.completed - oldest.completed) * 60.0 / (newest_at - oldest_at)

    def series(self, queue: str) -> tuple[list[float], list[float], list[float]]:
        """(seconds ago, completions per minute, running) per sample interval, oldest first."""
        points = [(s.at, s.queues.get(queue, QueuePoint(0, 0, 0))) for s in self._samples]
        if len(points) < 2:
            return [], [], []
        now = points[-1][0]
        ago, rate, running = [], [], []
        for (t0, p0), (t1, p1) in itertools.pairwise(points):
            if t1 <= t0:
                continue
            ago.append(now - t1)
            rate.append(max(0, p1.completed - p0.completed) * 60.0 / (t1 - t0))
            running.append(float(p1.running))
        return ago, rate, running
