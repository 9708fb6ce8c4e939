"""The worker events that feed counters and histograms, turned into recorder calls.

A recorder is one backend (Prometheus, OpenTelemetry). Per job the observer makes one
histogram observation at start, one at finish and one counter increment when the
outcome commits; per poll at most two increments. Nothing here does I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from awa.metrics import spec
from awa.worker.joblog import outcome_name
from awa.worker.observe import Observer

if TYPE_CHECKING:
    from awa.types import Job
    from awa.worker.results import Finalization
    from awa.worker.runtime import Worker


Hook = Callable[[float], None]


class Recorder(Protocol):
    """A metrics backend: counters are added to, histograms observed."""

    def bind(self, instrument: spec.Instrument, labels: tuple[str, ...]) -> Hook:
        """The function adding to (counter) or observing (histogram) one labelled series."""


class MetricsObserver(Observer):
    """Counts and times what the worker reports; remembers the worker for the gauges."""

    def __init__(
        self,
        recorders: Sequence[Recorder],
        on_start: Callable[[asyncio.AbstractEventLoop], None] | None = None,
    ) -> None:
        self._recorders = tuple(recorders)
        self._on_start = on_start
        self.worker: Worker | None = None
        self._settings: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
        # Per job this is the whole cost: one dict lookup, then the backends' own update.
        self._hooks: dict[tuple[str, tuple[str, ...]], tuple[Hook, ...]] = {}

    def _series(self, instrument: spec.Instrument, labels: tuple[str, ...]) -> tuple[Hook, ...]:
        key = (instrument.name, labels)
        hooks = self._hooks.get(key)
        if hooks is None:
            hooks = self._hooks[key] = tuple(r.bind(instrument, labels) for r in self._recorders)
        return hooks

    def _add(self, instrument: spec.Instrument, labels: tuple[str, ...], value: float = 1) -> None:
        for hook in self._series(instrument, labels):
            hook(value)

    def _observe(self, instrument: spec.Instrument, labels: tuple[str, ...], value: float) -> None:
        for hook in self._series(instrument, labels):
            hook(value)

    # -- lifecycle -------------------------------------------------------------------

    def worker_started(self, worker: Worker) -> None:
        self.worker = worker
        self._settings = {
            queue: (q.effective, q.ignored) for queue, q in worker.snapshot().queues.items()
        }
        if self._on_start is not None:
            self._on_start(asyncio.get_running_loop())

    def worker_stopped(self, worker: Worker) -> None:
        if self.worker is worker:
            self.worker = None

    # -- jobs ------------------------------------------------------------------------

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        self._observe(spec.PICKUP, (job.queue,), max(0.0, pickup_latency_s))

    def job_finished(self, job: Job[Any], outcome: Finalization | None, duration_s: float) -> None:
        self._observe(spec.DURATION, (job.queue,), max(0.0, duration_s))

    def handler_stopped(self, job: Job[Any], reason: str) -> None:
        self._add(spec.STOPPED, (job.queue, job.kind, reason.replace(" ", "_")))

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        for f in applied:
            if f.job is not None:
                self._add(spec.JOBS, (f.job.queue, f.job.kind, outcome_name(f)))

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        for f in stale:
            if f.job is not None and not f.dropped:  # a dropped outcome lost no lease
                self._add(spec.STALE, (f.job.queue, f.job.kind))

    def jobs_rescued(self, reason: str, rows: Sequence[tuple[int, str, str, str]]) -> None:
        for _, queue, kind, _ in rows:
            self._add(spec.RESCUED, (queue, kind, reason))

    # -- dispatch and control --------------------------------------------------------

    def polled(self, queue: str, claimed: int, rate_limited: bool) -> None:
        if claimed:
            self._add(spec.CLAIMED, (queue,), claimed)
        if rate_limited:
            self._add(spec.RATE_LIMITED, (queue,))

    def fleet_held(self, queue: str, reason: str) -> None:
        self._add(spec.FLEET_HOLDS, (queue, reason))

    def override_changed(
        self, queue: str, effective: dict[str, Any], ignored: dict[str, str]
    ) -> None:
        if queue not in self._settings:  # the start's first control read: a baseline, not a
            self._settings[queue] = (dict(effective), dict(ignored))  # change (a review)
            return
        before, refused_before = self._settings[queue]
        if effective != before:
            self._add(spec.OVERRIDES_APPLIED, (queue,))
        for setting, reason in ignored.items():
            if refused_before.get(setting) != reason:
                self._add(spec.OVERRIDES_IGNORED, (queue, setting))
        self._settings[queue] = (dict(effective), dict(ignored))
