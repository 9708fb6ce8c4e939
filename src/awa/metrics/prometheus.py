"""The Prometheus backend: counters and histograms on a registry of their own, gauges
collected at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from awa.metrics import spec
from awa.metrics.gauges import Samples
from awa.metrics.observer import Hook


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

    def bind(self, instrument: spec.Instrument, labels: tuple[str, ...]) -> Hook:
        """``inc`` or ``observe`` of the child series with these label values."""
        family = self._families[instrument.name]
        if isinstance(family, Counter):
            return family.labels(*labels).inc
        return family.labels(*labels).observe


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
