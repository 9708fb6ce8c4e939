"""OpenTelemetry traces with the real SDK and an in-memory exporter: the producer's context
travels in the job's metadata, each attempt is a consumer span in the producer's trace."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import awa
import awa.bridge
import awa.tracing
from awa.worker.observe import Observer
from tests.helpers import FAST_WORKER, wait_for


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


def _traceparent(span: Any) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def _consumer_spans(exporter: InMemorySpanExporter, job_id: int) -> list[ReadableSpan]:
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.kind == SpanKind.CONSUMER and s.attributes["messaging.message.id"] == str(job_id)
    ]
    return sorted(spans, key=lambda s: s.attributes["awa.job.attempt"])


async def test_every_insert_path_carries_the_current_span(
    client: awa.AsyncClient, provider: TracerProvider, database_url: str
) -> None:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        one = await client.insert({}, kind="k", metadata={"tenant": 7})
        many = await client.insert_many([{}, {}], kind="k")
        async with client.transaction() as tx:
            in_tx = await tx.insert({}, kind="k")
        with psycopg.connect(database_url) as conn:
            bridged = awa.bridge.insert_job(conn, {}, kind="k")
    expected = _traceparent(span)
    for job in [one, *many, in_tx, bridged]:
        stored = await client.get_job(job.id)
        assert stored.metadata["traceparent"] == expected
    assert (await client.get_job(one.id)).metadata["tenant"] == 7


async def test_no_span_no_metadata_and_an_explicit_context_wins(
    client: awa.AsyncClient, provider: TracerProvider
) -> None:
    outside = await client.insert({}, kind="k")
    assert (await client.get_job(outside.id)).metadata == {}
    handed_over = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with provider.get_tracer("test").start_as_current_span("request"):
        job = await client.insert({}, kind="k", metadata={"traceparent": handed_over})
    assert (await client.get_job(job.id)).metadata["traceparent"] == handed_over


async def test_each_attempt_is_a_consumer_span_in_the_producers_trace(
    client: awa.AsyncClient, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    awa.tracing.instrument(client, tracer_provider=provider)
    inner = provider.get_tracer("handler")

    @client.task(None, kind="flaky", queue="traced")
    async def flaky(job: awa.Job[Any]) -> Any:
        with inner.start_as_current_span("inside the handler"):
            pass
        return awa.RetryAfter(0.01) if job.attempt == 1 else None

    @client.task(None, kind="broken", queue="traced")
    async def broken(job: awa.Job[Any]) -> None:
        raise ValueError("no such customer")

    with provider.get_tracer("test").start_as_current_span("request") as producer:
        job = await client.insert({}, kind="flaky", queue="traced")
    failing = await client.insert({}, kind="broken", queue="traced", max_attempts=1)
    await client.start([("traced", 4)], **FAST_WORKER)
    try:
        await wait_for(lambda: _state_is(client, job.id, awa.JobState.COMPLETED))
        await wait_for(lambda: _state_is(client, failing.id, awa.JobState.FAILED))
    finally:
        await client.shutdown()

    first, second = _consumer_spans(exporter, job.id)
    producer_ctx = producer.get_span_context()
    for attempt, span in enumerate((first, second), start=1):
        assert span.name == "process traced"
        assert span.context.trace_id == producer_ctx.trace_id
        assert span.parent is not None and span.parent.span_id == producer_ctx.span_id
        assert [link.context.span_id for link in span.links] == [producer_ctx.span_id]
        assert span.attributes["messaging.system"] == "awa"
        assert span.attributes["messaging.operation.type"] == "process"
        assert span.attributes["messaging.destination.name"] == "traced"
        assert span.attributes["awa.job.kind"] == "flaky"
        assert span.attributes["awa.job.attempt"] == attempt
        assert span.status.status_code == StatusCode.UNSET
    assert first.context.span_id != second.context.span_id
    assert first.attributes["awa.job.outcome"] == "retryable"
    assert second.attributes["awa.job.outcome"] == "completed"
    children = [s for s in exporter.get_finished_spans() if s.name == "inside the handler"]
    assert {c.parent.span_id for c in children if c.parent} == {
        first.context.span_id,
        second.context.span_id,
    }

    (failed,) = _consumer_spans(exporter, failing.id)
    assert failed.parent is None  # inserted outside any span: a trace of its own
    assert failed.links == ()
    assert failed.attributes["awa.job.outcome"] == "failed"
    assert failed.attributes["error.type"] == "ValueError"
    assert failed.status.status_code == StatusCode.ERROR
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert event.attributes["exception.message"] == "no such customer"
    assert "ValueError" in event.attributes["exception.stacktrace"]


async def test_spans_a_sync_handler_opens_are_children_of_its_attempt(
    client: awa.AsyncClient, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    awa.tracing.instrument(client, tracer_provider=provider)
    inner = provider.get_tracer("handler")

    @client.task(None, kind="plain", queue="traced")
    def plain(job: awa.Job[Any]) -> None:  # runs in a handler thread
        with inner.start_as_current_span("inside the thread"):
            pass

    jobs = await client.insert_many([{}, {}], kind="plain", queue="traced")
    await client.start([("traced", 2)], **FAST_WORKER)
    try:
        for job in jobs:
            await wait_for(lambda j=job: _state_is(client, j.id, awa.JobState.COMPLETED))
    finally:
        await client.shutdown()

    attempts = {_consumer_spans(exporter, job.id)[0].context.span_id for job in jobs}
    children = [s for s in exporter.get_finished_spans() if s.name == "inside the thread"]
    assert len(children) == 2
    assert {c.parent.span_id for c in children if c.parent} == attempts


async def test_instrumenting_a_running_worker_is_refused_not_ignored(
    client: awa.AsyncClient, provider: TracerProvider
) -> None:
    client.task(None, kind="k", queue="traced")(lambda job: None)
    await client.start([("traced", 1)], **FAST_WORKER)
    try:
        with pytest.raises(awa.ValidationError) as caught:
            awa.tracing.instrument(client, tracer_provider=provider)
        assert caught.value.field == "instrument" and "before start()" in str(caught.value)
        with pytest.raises(awa.ValidationError, match="before start"):
            client.add_observer(Observer())
    finally:
        await client.shutdown()
    awa.tracing.instrument(client, tracer_provider=provider)  # for the next start()


async def test_a_cancelled_attempt_and_one_abandoned_at_shutdown_end_their_spans(
    client: awa.AsyncClient, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    awa.tracing.instrument(client, tracer_provider=provider)
    started: set[str] = set()

    @client.task(None, kind="forever", queue="traced")
    async def forever(job: awa.Job[Any]) -> None:
        started.add(job.args["name"])
        await asyncio.Event().wait()

    cancelled = await client.insert({"name": "cancelled"}, kind="forever", queue="traced")
    abandoned = await client.insert({"name": "abandoned"}, kind="forever", queue="traced")
    # No heartbeat during the test: the operator's cancel notice, not a heartbeat that
    # finds the row cancelled first ("lease lost"), is what stops the attempt.
    slow_heartbeat = {"heartbeat_interval_ms": 60_000, "heartbeat_staleness_ms": 120_000}
    await client.start([("traced", 2)], **{**FAST_WORKER, **slow_heartbeat})
    try:

        async def both_running() -> bool:
            return started == {"cancelled", "abandoned"}

        await wait_for(both_running)
        await client.cancel(cancelled.id)
        await wait_for(lambda: _has_span(exporter, cancelled.id))
    finally:
        await client.shutdown(timeout_ms=100)
    (span,) = _consumer_spans(exporter, cancelled.id)
    assert span.attributes["awa.job.outcome"] == "cancelled"
    (span,) = _consumer_spans(exporter, abandoned.id)
    assert span.attributes["awa.job.outcome"] in ("abandoned", "interrupted")


async def _has_span(exporter: InMemorySpanExporter, job_id: int) -> bool:
    return bool(_consumer_spans(exporter, job_id))


async def _state_is(client: awa.AsyncClient, job_id: int, state: awa.JobState) -> bool:
    return (await client.get_job(job_id)).state == state


def test_a_malformed_traceparent_starts_a_new_trace() -> None:
    assert awa.tracing.extract({"traceparent": "00-not-a-context-01"}) is None
    assert awa.tracing.extract({"traceparent": 42}) is None
    assert awa.tracing.extract({}) is None
    good = awa.tracing.extract(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    )
    assert good is not None


def test_off_without_a_configured_sdk() -> None:
    # This test process never sets a global tracer provider.
    assert not awa.tracing.configured()
    assert awa.tracing.automatic([]) == []


_AUTOMATIC = textwrap.dedent(
    """
    import asyncio, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import awa

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    async def main():
        async with awa.AsyncClient(sys.argv[1]) as client:
            done = asyncio.Event()

            @client.task(None, kind="k", queue="auto")
            async def handler(job):
                done.set()

            with trace.get_tracer("app").start_as_current_span("request"):
                await client.insert({}, kind="k", queue="auto")
            await client.start([("auto", 1)], poll_interval_ms=50)
            await asyncio.wait_for(done.wait(), 30)
            await client.shutdown()
        names = sorted(s.name for s in exporter.get_finished_spans())
        print(",".join(names))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize(
    ("disabled", "expected"),
    [("", "process auto,request"), ("awa", "request")],
)
def test_a_configured_sdk_turns_spans_on_by_itself(
    database_url: str, disabled: str, expected: str
) -> None:
    env = {**os.environ, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled}
    result = subprocess.run(
        [sys.executable, "-c", _AUTOMATIC, database_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_a_stale_outcome_ends_its_span_as_stale_not_as_what_the_handler_returned(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The span recorded a completion the write refused (the attempt had lost its lease):
    a trace of three completions for a job that completed once (a review)."""
    from datetime import UTC, datetime

    from awa.tracing.spans import Tracing
    from awa.types import JobState
    from awa.worker.results import Finalization

    now = datetime.now(UTC)
    job = awa.Job(id=7, kind="k", queue="q", args={}, state=JobState.RUNNING, priority=2,
                  attempt=1, max_attempts=3, run_lease=1, tags=[], metadata={}, progress=None,
                  errors=[], created_at=now, run_at=now, attempted_at=now, deadline_at=None,
                  finalized_at=None)  # fmt: skip
    tracing = Tracing(provider)
    stale, current = Finalization(job, JobState.COMPLETED), Finalization(job, JobState.COMPLETED)
    tracing.job_started(job, 0.0)
    tracing.job_finished(job, stale, 0.1)
    assert _consumer_spans(exporter, 7) == []  # open until its write says
    tracing.outcomes_stale([stale])
    retried = dataclasses.replace(job, run_lease=2, attempt=2)
    tracing.job_started(retried, 0.0)
    tracing.job_finished(retried, current, 0.1)
    tracing.outcomes_applied([Finalization(retried, JobState.COMPLETED)])
    outcomes = [s.attributes["awa.job.outcome"] for s in _consumer_spans(exporter, 7)]
    assert outcomes == ["stale", "completed"]
