"""The worker's observation seam: metrics, lifecycle hooks and tests subscribe here.

The runtime calls an :class:`Observer` at each step of a job's path. Every method is a
no-op by default, so an observer overrides only what it needs. Calls happen on the
worker's event loop and must be quick and non-blocking; an observer that raises is
logged and never affects the job.

``outcomes_applied`` fires only after the outcome's statement committed, and never for
a stale attempt. ``outcomes_durable`` fires later, once that commit is on the server's
disk (it survives a server crash): the place for "after the fact" effects that must not
happen twice, such as lifecycle hooks (ADR 0017). It costs one small statement per poll
while outcomes wait, so it is only tracked when an observer's ``needs_durable()`` says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa.types import Job
    from awa.worker.results import Finalization
    from awa.worker.runtime import Worker

logger = logging.getLogger("awa")


class Observer:
    """Base observer: override the events you care about."""

    def needs_durable(self) -> bool:
        """True when this observer wants ``outcomes_durable`` (see the module docstring)."""
        return False

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        """A handler is about to run (latency: from run_at to now)."""

    def job_finished(self, job: Job[Any], outcome: Finalization | None, duration_s: float) -> None:
        """A handler ended (outcome None: the attempt was cancelled or lost its lease)."""

    def attempt_stopped(self, job: Job[Any], reason: str) -> None:
        """A handler ended without an outcome because the worker stopped it: ``reason`` is
        ``"cancelled"`` (an operator's cancel, already committed), ``"lease lost"``,
        ``"deadline"`` (abandoned) or ``"shutdown"`` (the job was or will be returned by
        someone else).
        Called just before ``job_finished`` (with outcome None)."""

    def handler_stopped(self, job: Job[Any], reason: str) -> None:
        """The worker stopped a handler that had begun, before it returned: ``reason`` is
        ``"deadline"``, ``"lease unconfirmed"`` (no heartbeat confirmed its lease in
        time; ADR 0055), ``"lease lost"`` (rescued or taken elsewhere), ``"cancelled"``
        (an operator's cancel) or ``"shutdown"``. Once per attempt, when its run ends
        (a plain ``def`` may have run on after the stop)."""

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        """Outcomes committed to the database (after the commit, never for stale ones)."""

    def outcomes_durable(self, durable: Sequence[Finalization]) -> None:
        """Outcomes applied earlier whose commit is now durable (survives a crash)."""

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        """Outcomes refused because their attempt had lost its lease, or because an
        operator cancelled the job after its handler returned (``cancelled_first``), or
        that the database refused on their own and were dropped (``dropped``: the job
        stays running until rescued)."""

    def polled(self, queue: str, claimed: int, rate_limited: bool) -> None:
        """A dispatcher poll ended (claimed may be 0)."""

    def fleet_held(self, queue: str, reason: str) -> None:
        """The fleet held back a claim of ``queue`` (reason: ``concurrency``,
        ``partition``, ``pool`` or ``rate``); the jobs it did hand over are in ``polled``."""

    def jobs_rescued(self, reason: str, rows: Sequence[tuple[int, str, str, str]]) -> None:
        """The leader rescued jobs: rows of (id, queue, kind, new state)."""

    def override_changed(
        self, queue: str, effective: dict[str, Any], ignored: dict[str, str]
    ) -> None:
        """A queue's effective settings were recomputed from its control row."""

    def worker_started(self, worker: Worker) -> None:
        """The worker runs (gauges may read its snapshot until it stops)."""

    def worker_stopped(self, worker: Worker) -> None:
        """The worker has shut down."""


class Fanout(Observer):
    """Calls every registered observer, isolating their failures."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.observers = list(observers)

    def add(self, observer: Observer) -> None:
        """Subscribe one more observer."""
        self.observers.append(observer)

    def _each(self, method: str, *args: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception:
                logger.exception("observer %r failed in %s", observer, method)

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        if self.observers:
            self._each("job_started", job, pickup_latency_s)

    def job_finished(self, job: Job[Any], outcome: Finalization | None, duration_s: float) -> None:
        if self.observers:
            self._each("job_finished", job, outcome, duration_s)

    def attempt_stopped(self, job: Job[Any], reason: str) -> None:
        if self.observers:
            self._each("attempt_stopped", job, reason)

    def handler_stopped(self, job: Job[Any], reason: str) -> None:
        if self.observers:
            self._each("handler_stopped", job, reason)

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        if self.observers:
            self._each("outcomes_applied", applied)

    def needs_durable(self) -> bool:
        """True when any subscribed observer wants ``outcomes_durable``."""
        return any(o.needs_durable() for o in self.observers)

    def outcomes_durable(self, durable: Sequence[Finalization]) -> None:
        if self.observers:
            self._each("outcomes_durable", durable)

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        if self.observers:
            self._each("outcomes_stale", stale)

    def polled(self, queue: str, claimed: int, rate_limited: bool) -> None:
        if self.observers:
            self._each("polled", queue, claimed, rate_limited)

    def fleet_held(self, queue: str, reason: str) -> None:
        if self.observers:
            self._each("fleet_held", queue, reason)

    def jobs_rescued(self, reason: str, rows: Sequence[tuple[int, str, str, str]]) -> None:
        if self.observers:
            self._each("jobs_rescued", reason, rows)

    def override_changed(
        self, queue: str, effective: dict[str, Any], ignored: dict[str, str]
    ) -> None:
        if self.observers:
            self._each("override_changed", queue, effective, ignored)

    def worker_started(self, worker: Worker) -> None:
        if self.observers:
            self._each("worker_started", worker)

    def worker_stopped(self, worker: Worker) -> None:
        if self.observers:
            self._each("worker_stopped", worker)
