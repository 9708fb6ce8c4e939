"""Recent history for the charts: ``queue_stats()`` sampled on an interval, kept in memory.

The dashboard process samples every ``interval_s`` seconds and keeps ``keep_s`` seconds
of samples, so the charts cover the last minutes since the dashboard started. Nothing is
written to the database.
"""

from __future__ import annotations

import collections
import itertools
import time
from dataclasses import dataclass

import awa
from awa.service import Periodic


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


class Sampler(Periodic):
    """Samples ``queue_stats()`` in the background (a failed sample is logged and the
    next one tried at the next interval: the database may come back)."""

    def __init__(self, client: awa.AsyncClient, interval_s: float = 5.0, keep_s: float = 900.0):
        super().__init__("dashboard-sampler", interval_s, self.sample_once)
        self.client = client
        self._samples: collections.deque[Sample] = collections.deque(
            maxlen=max(2, int(keep_s / interval_s) + 1)
        )

    async def sample_once(self) -> Sample:
        """Take one sample now and keep it."""
        stats = await self.client.queue_stats()
        sample = Sample(
            time.time(),
            {s.queue: QueuePoint(s.completed, s.running, s.available) for s in stats},
        )
        self._samples.append(sample)
        return sample

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
