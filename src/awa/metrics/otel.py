"""The OpenTelemetry backend: the same instruments through an OTel ``Meter``.

``opentelemetry-api`` is optional: when it is not installed, :func:`available` is False
and awa exports Prometheus only. By default the global meter provider is used, and only
once an SDK provider has been set (the API's proxy provider means "not configured").
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from awa.errors import MissingExtra
from awa.metrics import spec
from awa.metrics.gauges import Samples
from awa.metrics.observer import Hook

try:
    from opentelemetry import metrics as otel_metrics
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    otel_metrics = None  # type: ignore[assignment]

_UNCONFIGURED = {"_ProxyMeterProvider", "ProxyMeterProvider", "NoOpMeterProvider"}


def available() -> bool:
    """True when ``opentelemetry-api`` can be imported."""
    return otel_metrics is not None


def configured() -> bool:
    """True when the application has set a real (SDK) global meter provider."""
    if otel_metrics is None:
        return False
    return type(otel_metrics.get_meter_provider()).__name__ not in _UNCONFIGURED


_recorders = itertools.count(1)


def _scope(database: str) -> tuple[str, dict[str, str]]:
    """The meter's name and attributes: a meter of its own for each recorder in the
    process. Two clients' recorders (two databases, or a client replaced by another) on
    one meter shared its instruments: the SDK kept the first recorder's gauge callbacks
    and dropped the others', and counters of the two were summed (a review). The first
    recorder of the process (the usual one) has the meter ``awa``, so it stays put across
    restarts; the next ones ``awa.2``, ``awa.3`` … — by name, not only by attributes,
    which the API's proxy provider (before an SDK's is set) drops."""
    number = next(_recorders)
    name = "awa" if number == 1 else f"awa.{number}"
    return name, {"awa.database": database, "awa.meter": str(number)}


class OtelRecorder:
    """Counters, histograms and observable gauges on one meter named ``awa``."""

    def __init__(
        self, meter_provider: Any | None, sample: Callable[[], Samples], database: str = ""
    ) -> None:
        if otel_metrics is None:
            raise MissingExtra("otel", "OpenTelemetry metrics", "opentelemetry-api")
        from awa import __version__

        provider = meter_provider or otel_metrics.get_meter_provider()
        name, attributes = _scope(database)
        meter = provider.get_meter(name, __version__, attributes=attributes)
        self._sample = sample
        self._counters: dict[str, Any] = {}
        self._histograms: dict[str, Any] = {}
        self._attributes: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}
        for instrument in spec.COUNTERS:
            self._counters[instrument.name] = meter.create_counter(
                instrument.otel_name, unit=instrument.unit, description=instrument.help
            )
        for instrument in spec.HISTOGRAMS:
            self._histograms[instrument.name] = meter.create_histogram(
                instrument.otel_name,
                unit=instrument.unit,
                description=instrument.help,
                explicit_bucket_boundaries_advisory=list(spec.SECONDS_BUCKETS),
            )
        for instrument in spec.GAUGES:
            meter.create_observable_gauge(
                instrument.otel_name,
                callbacks=[self._callback(instrument)],
                unit=instrument.unit,
                description=instrument.help,
            )

    def _attrs(self, instrument: spec.Instrument, labels: tuple[str, ...]) -> dict[str, str]:
        """A counter's or histogram's attributes, made once: their labels are this
        worker's own queues and kinds (bounded), and they are recorded per job."""
        key = (instrument.name, labels)
        attrs = self._attributes.get(key)
        if attrs is None:
            attrs = self._attributes[key] = dict(zip(instrument.labels, labels, strict=True))
        return attrs

    def bind(self, instrument: spec.Instrument, labels: tuple[str, ...]) -> Hook:
        """Adds to (counter) or records in (histogram) the series with these attributes."""
        attrs = self._attrs(instrument, labels)
        if instrument.name in self._counters:
            add = self._counters[instrument.name].add

            def counter(value: float) -> None:
                add(value, attrs)

            return counter
        record = self._histograms[instrument.name].record

        def histogram(value: float) -> None:
            record(value, attrs)

        return histogram

    def _callback(self, instrument: spec.Instrument) -> Callable[[Any], Iterable[Any]]:
        assert otel_metrics is not None
        observation = otel_metrics.Observation

        names = instrument.labels

        def observe(_options: Any) -> Iterable[Any]:
            # Fresh attributes for each sample, not cached: a gauge's labels follow the
            # queues in the database, which come and go; a cache kept one entry per queue
            # ever seen for the life of the process (a review of long runs).
            return [
                observation(value, dict(zip(names, labels, strict=True)))
                for labels, value in self._sample().get(instrument.name, ())
            ]

        return observe
