"""Prometheus metrics (and OpenTelemetry, when configured) for awa workers.

::

    import awa.metrics

    metrics = awa.metrics.instrument(client)        # before client.start()
    server = metrics.serve(port=9464)               # GET http://127.0.0.1:9464/metrics
    ...
    server.stop()

    # or in one call:  server = awa.metrics.serve(client, port=9464)
    # or mounted in a Starlette app:  Route("/metrics", awa.metrics.asgi_app(client))

Every metric is listed in ``docs/metrics.md`` and in :mod:`awa.metrics.spec`. Each
:class:`Metrics` has a ``CollectorRegistry`` of its own (``metrics.registry``), so two
clients in one process, or two tests, never share counters.
"""

from __future__ import annotations

from typing import Any

from awa.errors import ValidationError
from awa.extras import require

require("metrics", "awa.metrics")  # before prometheus_client is imported, to name the extra

# The imports below come after the check on purpose.
from awa.metrics.core import Metrics  # noqa: E402
from awa.metrics.http import MetricsApp, MetricsServer  # noqa: E402
from awa.metrics.spec import ALL as INSTRUMENTS  # noqa: E402


def _async_core(client: Any) -> Any:
    from awa.client.async_client import AsyncClient
    from awa.client.sync_client import Client

    if isinstance(client, Client):
        return client.async_client
    if isinstance(client, AsyncClient):
        return client
    raise ValidationError("client", f"expected an awa.AsyncClient or awa.Client, got {client!r}")


def instrument(client: Any, **options: Any) -> Metrics:
    """Metrics for ``client``'s next worker: call before ``client.start()``.

    ``options`` go to :class:`Metrics` (``registry``, ``stats_max_age_s``,
    ``otel_enabled``, ``meter_provider``).
    """
    core = _async_core(client)
    try:
        core.runtime_snapshot()
    except ValidationError:
        pass  # no worker yet: the expected case
    else:
        raise ValidationError("instrument", "call awa.metrics.instrument() before start()")
    metrics = Metrics(client, **options)
    core.add_observer(metrics.observer)
    return metrics


def serve(target: Any, *, port: int, host: str = "127.0.0.1", **options: Any) -> MetricsServer:
    """Serve ``/metrics`` for a client (instrumenting it) or an existing :class:`Metrics`.

    Returns the started :class:`MetricsServer`; call ``stop()`` when done.
    """
    metrics = target if isinstance(target, Metrics) else instrument(target, **options)
    return metrics.serve(port=port, host=host)


def asgi_app(target: Any, **options: Any) -> MetricsApp:
    """An ASGI app for ``/metrics`` from a client or an existing :class:`Metrics`.

    With a client that runs no worker in this process (a dashboard), the app serves the
    queue gauges (depth, lag, pause) only; worker counters come from the workers' own
    endpoints.
    """
    if isinstance(target, Metrics):
        return target.asgi_app()
    _async_core(target)
    return Metrics(target, **options).asgi_app()


__all__ = [
    "INSTRUMENTS",
    "Metrics",
    "MetricsApp",
    "MetricsServer",
    "asgi_app",
    "instrument",
    "serve",
]
