"""One :class:`Metrics` per client: its registry, its observer and its gauges."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from awa.db.connection import where
from awa.errors import ValidationError
from awa.metrics import fleet, otel
from awa.metrics.gauges import Samples, StatsCache, stats_samples, worker_samples
from awa.metrics.http import MetricsApp, MetricsServer
from awa.metrics.observer import MetricsObserver, Recorder
from awa.metrics.prometheus import GaugeCollector, PrometheusRecorder


class Metrics:
    """Prometheus (and, when configured, OpenTelemetry) instruments for one client.

    ``client`` is an :class:`awa.AsyncClient` or :class:`awa.Client` (or None: only what
    the observer sees, no queue statistics). Counters and histograms are fed by
    :attr:`observer`, which :func:`awa.metrics.instrument` subscribes to the client's
    worker. Gauges are read at scrape time; queue statistics are cached ``stats_max_age_s``.

    ``otel``: None (default) mirrors the instruments through OpenTelemetry when
    ``meter_provider`` is given or a global SDK provider is set; True forces it (an error
    if ``opentelemetry-api`` is missing); False turns it off.
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        client: Any = None,
        *,
        registry: CollectorRegistry | None = None,
        stats_max_age_s: float = 1.0,
        otel_enabled: bool | None = None,
        meter_provider: Any | None = None,
    ) -> None:
        if stats_max_age_s < 0:
            raise ValidationError("stats_max_age_s", "must be >= 0")
        self.client = client
        self.registry = registry if registry is not None else CollectorRegistry()
        self._rendering = threading.local()  # render(stats=False) in this thread
        self.stats = StatsCache(
            client, max_age_s=stats_max_age_s, with_fleet=lambda: self.observer.worker is None
        )
        # Otherwise bound when the worker starts or at the first async refresh.
        with contextlib.suppress(RuntimeError):
            self.stats.bind(asyncio.get_running_loop())
        recorders: list[Recorder] = [PrometheusRecorder(self.registry)]
        if otel_enabled is None:
            otel_enabled = otel.available() and (meter_provider is not None or otel.configured())
        self.otel_enabled = otel_enabled
        if otel_enabled:
            recorders.append(
                otel.OtelRecorder(
                    meter_provider, self.samples, where(getattr(client, "database_url", None))
                )
            )
        self.observer = MetricsObserver(recorders, on_start=self.stats.bind)
        self.registry.register(GaugeCollector(self.samples))

    def samples(self) -> Samples:
        """Every gauge's current samples (refreshing stale queue statistics if possible);
        none once the client is closed — an OTel meter keeps a replaced client's gauge
        callbacks, which exported its last values for ever beside its successor's."""
        if _closed(self.client):
            return {}
        with_stats = not getattr(self._rendering, "without_stats", False)
        if with_stats:
            self.stats.ensure_fresh()
        worker = self.observer.worker
        snap = worker.snapshot() if worker is not None else None
        read_at = self.stats.fetched_at
        samples = (
            stats_samples(
                self.stats.stats,
                list(snap.queues) if snap is not None else [],
                age_s=time.monotonic() - read_at,
            )
            if with_stats and read_at is not None
            else {}  # never read (render() on the loop, or the first read failed): unknown,
        )  # not zero — an empty queue and one nobody looked at must not read the same
        if snap is not None:
            samples.update(worker_samples(snap))
            samples.update(fleet.snapshot_samples(snap.queues))
        elif self.stats.fleet is not None:
            samples.update(fleet.stored_samples(self.stats.fleet))
        return samples

    async def refresh(self, *, force: bool = False) -> None:
        """Read ``queue_stats()`` now unless the cached values are fresh."""
        await self.stats.refresh(force=force)

    def render(self, *, stats: bool = True) -> bytes:
        """The Prometheus text exposition of every metric. On the event loop it cannot
        wait for stale queue statistics: there ``await scrape()`` reads them first (until
        a first read, depth, lag and pause are left out rather than shown as zero).
        ``stats=False`` leaves depth, lag and pause out without reading them (a
        supervisor asks one child of several for them: each read is a query)."""
        if stats:
            return generate_latest(self.registry)
        self._rendering.without_stats = True
        try:
            return generate_latest(self.registry)
        finally:
            self._rendering.without_stats = False

    async def scrape(self) -> bytes:
        """Refresh the queue statistics on this event loop, then render."""
        await self.refresh()
        return self.render()

    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread (started)."""
        return MetricsServer(self, port=port, host=host).start()

    def asgi_app(self) -> MetricsApp:
        """An ASGI app serving these metrics (mount it at ``/metrics``)."""
        return MetricsApp(self)


def _closed(client: Any) -> bool:
    """Whether ``client`` (an AsyncClient, or a blocking Client around one) was closed."""
    core = getattr(client, "_core", client)
    return bool(getattr(core, "_closed", False))
