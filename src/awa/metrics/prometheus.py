"""The Prometheus backend: counters and histograms on a registry of their own, gauges
collected at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from awa.metrics import spec
from awa.metrics.gauges import Samples


class PrometheusRecorder:
    """Counters and histograms of :mod:`awa.metrics.spec`, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._families: dict[str, Counter | Histogram] = {}
        for instrument in spec.COUNTERS:
            self._families[instrument.name] = Counter(
                instrument.name, instrument.help, instrument.labels, registry=registry
            )
        for instrument in spec.HISTOGRAMS:
            self._families[instrument.name] = Histogram(
                instrument.name,
                instrument.help,
                instrument.labels,
                registry=registry,
                buckets=spec.SECONDS_BUCKETS,
            )
        # Label lookups cost more than the update itself: keep each child once.
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}

    def _child(self, instrument: spec.Instrument, labels: tuple[str, ...]) -> Any:
        key = (instrument.name, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._families[instrument.name].labels(*labels)
        return child

    def add(self, instrument: spec.Instrument, labels: tuple[str, ...], value: float) -> None:
        """Increment a counter."""
        self._child(instrument, labels).inc(value)

    def observe(self, instrument: spec.Instrument, labels: tuple[str, ...], value: float) -> None:
        """Observe a histogram value."""
        self._child(instrument, labels).observe(value)


class GaugeCollector(Collector):
    """Yields every gauge of :mod:`awa.metrics.spec` from ``sample()`` at each scrape."""

    def __init__(self, sample: Callable[[], Samples]) -> None:
        self._sample = sample

    def collect(self) -> Iterator[Metric]:
        samples = self._sample()
        for instrument in spec.GAUGES:
            family = GaugeMetricFamily(instrument.name, instrument.help, labels=instrument.labels)
            for labels, value in samples.get(instrument.name, ()):
                family.add_metric(labels, value)
            yield family
