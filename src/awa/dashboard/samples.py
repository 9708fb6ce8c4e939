"""Recent history for the charts: ``queue_stats()`` sampled on an interval, kept in memory.

The dashboard process samples every ``interval_s`` seconds and keeps ``keep_s`` seconds
of samples, so the charts cover the last minutes since the dashboard started. Nothing is
written to the database. A sample costs the database what ``queue_stats()`` costs (its
waiting and running jobs; the finished ones are counted as they change, ADR 0054): the
next sample waits at least ``COST_SHARE`` times as long as the last one took, so an
unwatched dashboard never takes more than a twentieth of a core from the workers.

The chart's throughput is each sample's count of completions in the last minute (the
pages' "per min" is the same count, read with the page). Differences of the retained
``completed`` count are not a rate: the pruner takes a minute of yesterday's
completions out of it every minute, and a steady queue read as 0 per minute.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import awa
from awa.service import Periodic

# The sampler waits at least this many times as long as its last sample took.
COST_SHARE = 20.0


@dataclass(frozen=True, slots=True)
class QueuePoint:
    """One queue's counters at one sample."""

    per_minute: int  # completions in the minute before the sample
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
        self.base_interval_s = interval_s
        self.keep_s = keep_s
        self._samples: collections.deque[Sample] = collections.deque()

    async def sample_once(self) -> Sample:
        """Take one sample now and keep it."""
        started = time.monotonic()
        stats = await self.client.queue_stats()
        self.interval_s = max(self.base_interval_s, COST_SHARE * (time.monotonic() - started))
        sample = Sample(
            time.time(),
            {s.queue: QueuePoint(s.completed_last_minute, s.running, s.available) for s in stats},
        )
        self._samples.append(sample)
        while self._samples and self._samples[0].at < sample.at - self.keep_s:
            self._samples.popleft()  # by age: the interval grows with the samples' cost
        return sample

    def samples(self) -> list[Sample]:
        """Every kept sample, oldest first."""
        return list(self._samples)

    def series(self, queue: str) -> tuple[list[float], list[float], list[float]]:
        """(seconds ago, completions per minute, running) per sample, oldest first."""
        points = [(s.at, s.queues.get(queue, QueuePoint(0, 0, 0))) for s in self._samples]
        if len(points) < 2:
            return [], [], []
        now = points[-1][0]
        ago = [now - at for at, _ in points]
        return ago, [float(p.per_minute) for _, p in points], [float(p.running) for _, p in points]
