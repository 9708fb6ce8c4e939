"""Gauges: read when scraped, never updated per job.

Queue depth, lag and pause come from ``queue_stats()`` (one grouped scan, the same
numbers for every process), cached for ``max_age_s`` so several scrapers cost one query;
in a process running no worker, the fleet limits and pool are read with them
(:mod:`awa.metrics.fleet`).
In-flight, capacity, overflow and ignored overrides come from the running worker's
snapshot (:meth:`awa.worker.runtime.Worker.snapshot`), built on the worker's loop.

A scrape served from a thread (the built-in HTTP server, an OTel reader) refreshes the
statistics on the event loop that owns the client's pool and waits for them at most
``timeout_s``; a scrape on an event loop (the ASGI app) awaits :meth:`StatsCache.refresh`
first. When a refresh is impossible or fails, the last values are served.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from awa.metrics import spec
from awa.metrics.fleet import StoredFleet
from awa.types import HardReserved, QueueStat, RuntimeSnapshot, Weighted

logger = logging.getLogger("awa")

Sample = tuple[tuple[str, ...], float]
Read = tuple[list[QueueStat], StoredFleet | None]
Samples = dict[str, list[Sample]]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


STATS_TIMEOUT_S = 2.0
"""How long a scrape waits for fresh queue statistics before it serves the last ones."""


class StatsCache:
    """The last ``queue_stats()`` of one client, refreshed on demand."""

    def __init__(
        self,
        client: Any,
        *,
        max_age_s: float = 1.0,
        timeout_s: float = STATS_TIMEOUT_S,
        with_fleet: Callable[[], bool] = lambda: False,
    ) -> None:
        from awa.client.sync_client import Client

        self._client = client
        self._blocking_client = isinstance(client, Client)
        self._with_fleet = with_fleet
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s
        self.stats: list[QueueStat] = []
        self.fleet: StoredFleet | None = None  # read only while ``with_fleet()`` holds
        self.fetched_at: float | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._tried_at: float | None = None  # when the last blocking read ended
        self._pending: Future[Read] | None = None  # a read on ``loop`` still under way
        self._pending_lock = threading.Lock()
        self._failing = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Use ``loop`` (where the client's pool lives) for refreshes from other threads."""
        self.loop = loop

    def fresh(self) -> bool:
        """True while the cached statistics are younger than ``max_age_s``."""
        return self.fetched_at is not None and time.monotonic() - self.fetched_at < self.max_age_s

    async def _read(self) -> Read:
        stats = await self._client.queue_stats()
        if not self._with_fleet():
            return stats, None
        limits = await self._client.queue_limits_status()
        return stats, StoredFleet(limits, await self._client.fleet_pool())

    def _read_blocking(self) -> Read:
        stats = self._client.queue_stats()
        if not self._with_fleet():
            return stats, None
        return stats, StoredFleet(self._client.queue_limits_status(), self._client.fleet_pool())

    def _store(self, read: Read) -> None:
        self.stats, self.fleet = read
        self.fetched_at = time.monotonic()
        if self._failing:
            logger.info("metrics: queue_stats() works again", extra={"event": "metrics_stats"})
            self._failing = False

    def _failed(self, exc: BaseException) -> None:
        if not self._failing:
            if isinstance(exc, TimeoutError):
                why = f"takes over {self.timeout_s:g} s; it goes on"
            else:
                why = f"failed ({str(exc) or type(exc).__name__})"
            logger.warning(
                "metrics: queue_stats() %s; serving the last values", why,
                extra={"event": "metrics_stats"},
            )  # fmt: skip
            self._failing = True

    async def refresh(self, *, force: bool = False) -> None:
        """Read ``queue_stats()`` now unless the cache is fresh (or ``force``)."""
        if self._client is None or (self.fresh() and not force):
            return
        try:
            if self._blocking_client:
                read = await asyncio.to_thread(self._read_blocking)
            else:
                current = asyncio.get_running_loop()
                if self.loop is None or self.loop.is_closed() or not self.loop.is_running():
                    self.loop = current
                if self.loop is current:
                    read = await self._read()
                else:
                    future = self._submit(self.loop)
                    async with asyncio.timeout(self.timeout_s):  # the read goes on (shield)
                        read = await asyncio.shield(asyncio.wrap_future(future))
        except Exception as exc:
            self._failed(exc)
            return
        self._store(read)

    def ensure_fresh(self) -> None:
        """Refresh if stale and this thread may block (it runs no event loop).

        One read at a time, and a scrape never waits longer than ``timeout_s`` in all:
        one that finds a read under way waits for it (at most that long) and serves what
        it left, fresh or not, rather than try again — two scrapes at once on a slow
        database each waited a full ``timeout_s`` in turn, the second past its scraper's
        patience (the supervisor read the child as down, a review)."""
        if self._client is None or self.fresh() or _running_loop() is not None:
            return
        if not self._lock.acquire(timeout=self.timeout_s):
            return  # another scrape's read is under way still: serve the last values
        try:
            if self.fresh() or self._tried_recently():
                return
            try:
                self._read_or_keep()
            finally:  # only a read that was tried: a scrape served from the cache is none
                self._tried_at = time.monotonic()
        finally:
            self._lock.release()

    def _tried_recently(self) -> bool:
        """A read ended (read or failed) within ``max_age_s``: another would fare no better."""
        return self._tried_at is not None and time.monotonic() - self._tried_at < self.max_age_s

    def _read_or_keep(self) -> None:
        """Read the statistics now (blocking), or keep the last ones if that fails."""
        try:
            if self._blocking_client:
                read = self._read_blocking()
            else:
                loop = self.loop
                if loop is None or loop.is_closed() or not loop.is_running():
                    return
                read = self._submit(loop).result(self.timeout_s)
        except Exception as exc:
            self._failed(exc)
            return
        self._store(read)

    def _submit(self, loop: asyncio.AbstractEventLoop) -> Future[Read]:
        """The read under way on ``loop``, or a new one. A read that outlasts the scrape
        waiting for it is not cancelled: it goes on and stores what it reads for the next
        scrape. Cancelled at each scrape's timeout, a read slower than the timeout (a few
        million retained jobs, several processes reading at once) never completed, and
        depth, lag and pause were never served at all (a review)."""
        with self._pending_lock:
            future = self._pending
            if future is not None:
                return future
            future = self._pending = asyncio.run_coroutine_threadsafe(self._read(), loop)
        future.add_done_callback(self._landed)  # (runs here at once if already done)
        return future

    def _landed(self, future: Future[Read]) -> None:
        with self._pending_lock:
            if self._pending is future:
                self._pending = None
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            self._store(future.result())
        elif isinstance(exc, Exception):
            self._failed(exc)


def stats_samples(stats: list[QueueStat], extra_queues: list[str], age_s: float) -> Samples:
    """Depth, lag and pause per queue (zeros for worker queues with no jobs yet), read
    ``age_s`` seconds ago."""
    depth: list[Sample] = []
    lag: list[Sample] = []
    paused: list[Sample] = []
    seen = set()
    for s in stats:
        seen.add(s.queue)
        depth.extend(((s.queue, state), float(getattr(s, state))) for state in spec.DEPTH_STATES)
        lag.append(((s.queue,), float(s.lag_seconds or 0.0)))
        paused.append(((s.queue,), 1.0 if s.paused else 0.0))
    for queue in extra_queues:
        if queue not in seen:
            depth.extend(((queue, state), 0.0) for state in spec.DEPTH_STATES)
            lag.append(((queue,), 0.0))
            paused.append(((queue,), 0.0))
    return {
        spec.DEPTH.name: depth, spec.LAG.name: lag, spec.PAUSED.name: paused,
        spec.STATS_AGE.name: [((), max(age_s, 0.0))],
    }  # fmt: skip


def _overflow_total(snap: RuntimeSnapshot) -> int:
    """The shared overflow pool of a weighted worker (0 in hard-reserved mode)."""
    if snap.global_max_workers is None:
        return 0
    capacities = (q.capacity for q in snap.queues.values())
    return snap.global_max_workers - sum(
        c.min_workers for c in capacities if isinstance(c, Weighted)
    )


def worker_samples(snap: RuntimeSnapshot) -> Samples:
    """In-flight, capacity, overflow held and ignored overrides per queue of a worker.

    In-flight counts handlers running now; the permits a poll reserves for the length of
    its claim are not jobs yet, so they are left out (they do show in overflow held).
    """
    overflow_total = _overflow_total(snap)
    in_flight: list[Sample] = []
    capacity: list[Sample] = []
    overflow: list[Sample] = []
    ignored: list[Sample] = []
    for queue, q in snap.queues.items():
        shape = q.capacity
        in_flight.append(((queue,), float(q.running)))
        if isinstance(shape, HardReserved):
            capacity.append(((queue,), float(shape.max_workers)))
            overflow.append(((queue,), 0.0))
        else:
            capacity.append(((queue,), float(shape.min_workers + overflow_total)))
            overflow.append(((queue,), float(shape.overflow_held)))
        refused = q.ignored
        ignored.extend(
            ((queue, setting), 1.0 if setting in refused else 0.0)
            for setting in spec.OVERRIDE_SETTINGS
        )
    return {
        spec.IN_FLIGHT.name: in_flight,
        spec.CAPACITY.name: capacity,
        spec.OVERFLOW_HELD.name: overflow,
        spec.IGNORED_ACTIVE.name: ignored,
    }
