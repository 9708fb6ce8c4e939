"""The producer's trace context, carried in a job's metadata as W3C Trace Context.

``carry`` runs on every insert. Without ``opentelemetry-api`` it returns at once; with
the API but no SDK there is never a valid current span, so it writes nothing. Only a
producer inside a real span adds ``traceparent`` (and ``tracestate`` when the span has
one) to the job's metadata. A ``traceparent`` the caller put in ``metadata`` is kept:
that is how a producer hands over a context it received from elsewhere.

This module imports nothing else of awa: the insert path depends on it, not the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # awa runs without OpenTelemetry; tracing is then simply off
    otel_trace = None  # type: ignore[assignment]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"


def available() -> bool:
    """True when ``opentelemetry-api`` can be imported."""
    return otel_trace is not None


def current() -> dict[str, str] | None:
    """The current span's context as metadata entries; None when there is no span."""
    if otel_trace is None:
        return None
    context = otel_trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    entries = {
        TRACEPARENT: f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    }
    if context.trace_state:
        entries[TRACESTATE] = context.trace_state.to_header()
    return entries


def carry(metadata: dict[str, Any]) -> None:
    """Add the current span's context to ``metadata`` (in place), unless it has one."""
    if otel_trace is None or TRACEPARENT in metadata:
        return
    entries = current()
    if entries is not None:
        metadata.update(entries)


def extract(metadata: Mapping[str, Any] | None) -> Context | None:
    """The producer's context from a job's metadata; None when it carries none (or junk)."""
    if otel_trace is None or not metadata:
        return None
    traceparent = metadata.get(TRACEPARENT)
    if not isinstance(traceparent, str):
        return None
    carrier = {TRACEPARENT: traceparent}
    tracestate = metadata.get(TRACESTATE)
    if isinstance(tracestate, str):
        carrier[TRACESTATE] = tracestate
    context = TraceContextTextMapPropagator().extract(carrier)
    if not otel_trace.get_current_span(context).get_span_context().is_valid:
        return None  # malformed: the consumer span starts a trace of its own
    return context
