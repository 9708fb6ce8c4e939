"""OpenTelemetry traces: the producer's context travels with the job, each attempt is a
consumer span in that trace.

Nothing to do when the OpenTelemetry SDK is configured in the process: inserts made
inside a span carry its ``traceparent`` in the job's metadata, and a worker started
while a tracer provider is set records one ``CONSUMER`` span per attempt. Without the
SDK (or without ``opentelemetry-api``) both are off and cost one check per insert.

::

    import awa.tracing
    awa.tracing.instrument(client, tracer_provider=provider)   # explicit, before start()

``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=awa`` turns the automatic spans off.
See ``docs/integrations/opentelemetry.md``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from awa.errors import ValidationError
from awa.tracing.context import TRACEPARENT, TRACESTATE, available, carry, extract

if TYPE_CHECKING:
    from awa.worker.observe import Observer

# Provider classes the API hands out before an SDK is configured.
_UNCONFIGURED = frozenset({"ProxyTracerProvider", "NoOpTracerProvider"})


def configured() -> bool:
    """True when an OpenTelemetry SDK tracer provider is set for this process."""
    if not available():
        return False
    from opentelemetry import trace

    return type(trace.get_tracer_provider()).__name__ not in _UNCONFIGURED


def disabled_by_env() -> bool:
    """True when ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` names ``awa``."""
    names = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return "awa" in {name.strip() for name in names.split(",")}


def automatic(observers: Sequence[Observer]) -> list[Observer]:
    """The observer a starting worker adds by itself: spans when the SDK is configured,
    nothing when it is not, when disabled, or when ``instrument`` already added one."""
    if disabled_by_env() or not configured():
        return []
    from awa.tracing.spans import Tracing

    if any(isinstance(observer, Tracing) for observer in observers):
        return []
    return [Tracing()]


def instrument(client: Any, *, tracer_provider: Any = None) -> Observer:
    """Record spans for ``client``'s next worker with ``tracer_provider`` (default: the
    global one). Call before ``client.start()``; returns the observer."""
    if not available():
        raise ValidationError(
            "tracing", "opentelemetry-api is not installed (pip install 'awa[otel]')"
        )
    from awa.client.async_client import AsyncClient
    from awa.client.sync_client import Client
    from awa.tracing.spans import Tracing

    core = client.async_client if isinstance(client, Client) else client
    if not isinstance(core, AsyncClient):
        raise ValidationError(
            "client", f"expected an awa.AsyncClient or awa.Client, got {client!r}"
        )
    if core._worker is not None:
        raise ValidationError("instrument", "call awa.tracing.instrument() before start()")
    observer = Tracing(tracer_provider)
    core.add_observer(observer)
    return observer


__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "automatic",
    "carry",
    "configured",
    "extract",
    "instrument",
]
