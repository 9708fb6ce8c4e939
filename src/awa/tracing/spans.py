"""One consumer span per attempt, built on the worker's :class:`Observer` seam.

``job_started`` opens the span and makes it current for the rest of the attempt's task,
so spans an async handler opens (database calls, HTTP requests) are its children.
``job_finished`` records the outcome; the span ends (at that instant) once the outcome's
write says whether it took effect: an outcome refused as stale — the attempt had lost
its lease — is recorded as ``stale``, not as what the handler returned (a review saw a
trace of three completions for a job that completed once). The parent is the producer's context
from the job's metadata, so every attempt of a job, retries included, lands in the
producer's trace as a separate span; the span also links to the producer's span, which
is how the messaging conventions tie a consumer to its message.

Attributes follow the OpenTelemetry messaging conventions (``messaging.system`` "awa",
``messaging.operation.type`` "process", ``messaging.destination.name`` the queue,
``messaging.message.id`` the job id) plus ``awa.job.kind``, ``awa.job.attempt`` and
``awa.job.outcome``; a failed attempt adds ``error.type``, an ``exception`` event and
an error status. The SDK spends most of a span's cost cleaning attributes, so there are
no more than these.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextvars import Token
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider

from awa.tracing.context import extract
from awa.types import JobState
from awa.worker.observe import Observer

if TYPE_CHECKING:
    from awa.types import Job
    from awa.worker.results import Finalization
    from awa.worker.runtime import Worker

SYSTEM = "awa"
# What an attempt ended as, named for people reading traces (a snoozed job is
# "scheduled" in the table, but the handler asked to be run later).
_OUTCOMES = {JobState.SCHEDULED: "snoozed", JobState.WAITING_EXTERNAL: "waiting_external"}
# Outcomes the handler chose: recorded with an error entry, but not errors of the span.
_CHOSEN = frozenset({"RetryAfter", "Cancel"})

_Key = tuple[int, int]  # (job id, run_lease): one attempt
# Outcomes being written at once, at most (the completer's backlog is 10 000): beyond it a
# span ends with its handler, as it would if its write were never reported.
_MAX_WRITING = 20_000


class Tracing(Observer):
    """The observer that turns attempts into consumer spans."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from awa import __version__

        self.tracer = otel_trace.get_tracer("awa", __version__, tracer_provider=tracer_provider)
        self._open: dict[_Key, tuple[Span, Token[otel_context.Context]]] = {}
        self._stopped: dict[_Key, str] = {}  # why the worker stopped an attempt
        # Ended handlers whose outcome is being written: (span, when the handler ended).
        self._writing: dict[_Key, tuple[Span, int]] = {}

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        parent = extract(job.metadata)
        links: tuple[Link, ...] = ()
        if parent is not None:
            links = (Link(otel_trace.get_current_span(parent).get_span_context()),)
        span = self.tracer.start_span(
            f"process {job.queue}",
            context=parent if parent is not None else otel_context.Context(),
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "awa.job.kind": job.kind,
                "awa.job.attempt": job.attempt,
            },
        )
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        self._open[(job.id, job.run_lease)] = (span, token)

    def attempt_stopped(self, job: Job[Any], reason: str) -> None:
        if (job.id, job.run_lease) in self._open:
            self._stopped[(job.id, job.run_lease)] = reason

    def job_finished(self, job: Job[Any], outcome: Finalization | None, duration_s: float) -> None:
        reason = self._stopped.pop((job.id, job.run_lease), None)
        entry = self._open.pop((job.id, job.run_lease), None)
        if entry is None:
            return
        span, token = entry
        otel_context.detach(token)
        if outcome is None:
            # An operator's cancel, a lost lease or a deadline: the row moved on already.
            cancelled = reason == "cancelled"
            span.set_attribute("awa.job.outcome", "cancelled" if cancelled else "interrupted")
            if reason is not None:
                span.set_attribute("awa.job.cancel_reason", str(reason))
        else:
            _record(span, outcome)
            if len(self._writing) < _MAX_WRITING:  # else (never seen): end it as it was
                self._writing[(job.id, job.run_lease)] = (span, time.time_ns())
                return
        span.end()

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        for f in applied:
            written = self._writing.pop((f.job_id, f.run_lease), None)
            if written is not None:
                span, ended = written
                span.end(end_time=ended)

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        for f in stale:
            written = self._writing.pop((f.job_id, f.run_lease), None)
            if written is not None:
                span, ended = written
                name = "dropped" if f.dropped else "cancelled" if f.cancelled_first else "stale"
                span.set_attribute("awa.job.outcome", name)
                span.end(end_time=ended)

    def worker_stopped(self, worker: Worker) -> None:
        # Attempts abandoned at shutdown never reach job_finished; end their spans here
        # (their contexts died with their tasks, so there is nothing to detach).
        for span, _ in self._open.values():
            span.set_attribute("awa.job.outcome", "abandoned")
            span.end()
        for span, ended in self._writing.values():  # written or not, the worker is gone
            span.end(end_time=ended)
        self._open.clear()
        self._stopped.clear()
        self._writing.clear()


def _record(span: Span, outcome: Finalization) -> None:
    name = _OUTCOMES.get(outcome.state, outcome.state.value)
    span.set_attribute("awa.job.outcome", name)
    error = outcome.error
    if error is None or error.get("type") in _CHOSEN:
        return
    error_type = str(error.get("type", "Exception"))
    message = str(error.get("error", ""))
    span.set_attribute("error.type", error_type)
    attributes = {"exception.type": error_type, "exception.message": message}
    if "traceback" in error:
        attributes["exception.stacktrace"] = str(error["traceback"])
    span.add_event("exception", attributes)
    span.set_status(Status(StatusCode.ERROR, message))
