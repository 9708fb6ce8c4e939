"""Metrics and structured logs of a real worker: scraped over HTTP while it runs.

One workload covers every outcome (complete, raise → retry → fail, terminal failure,
cancel, snooze), a stale completion, two heartbeat rescues, a rate-limited queue and a
refused and an applied override, in weighted mode; the scrape must count exactly what ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import awa
import awa.metrics
from awa.cli.main import build_parser
from awa.metrics import spec
from tests.helpers import FAST_WORKER, wait_for, wait_until

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

GLOBAL_MAX = 8
MIN_WORKERS = {"metrics": 2, "limited": 1}


def parse(body: bytes) -> Series:
    """Every sample of a scrape, keyed by (sample name, labels)."""
    series: Series = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            series[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return series


def value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


def by_label(series: Series, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Non-zero samples of ``name`` keyed by the values of ``keys``."""
    out = {}
    for (sample, labels), v in series.items():
        if sample == name and v:
            as_dict = dict(labels)
            out[tuple(as_dict[k] for k in keys)] = v
    return out


async def scrape(url: str) -> Series:
    def get() -> bytes:
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            body: bytes = response.read()
            return body

    return parse(await asyncio.to_thread(get))


EXPECTED_OUTCOMES = {
    ("metrics", "ok", "completed"): 5,
    ("metrics", "boom", "retried"): 1,
    ("metrics", "boom", "failed"): 1,
    ("metrics", "terminal", "failed"): 1,
    ("metrics", "cancel", "cancelled"): 1,
    ("metrics", "snooze", "snoozed"): 1,
    ("metrics", "snooze", "completed"): 1,
    ("limited", "ok", "completed"): 3,
}
ATTEMPTS = {"metrics": 5 + 2 + 1 + 1 + 2 + 1 + 1, "limited": 3}  # + stale + gate


def register(client: awa.AsyncClient, db: psycopg.Connection[Any], gate: asyncio.Event) -> None:
    snoozed: set[int] = set()

    @client.task(None, kind="ok", queue="metrics")
    async def ok(job: awa.Job[Any]) -> None:
        return None

    @client.task(None, kind="boom", queue="metrics")
    async def boom(job: awa.Job[Any]) -> None:
        raise ValueError(f"boom on attempt {job.attempt}")

    @client.task(None, kind="terminal", queue="metrics")
    async def terminal(job: awa.Job[Any]) -> None:
        raise awa.TerminalError("no point retrying")

    @client.task(None, kind="cancel", queue="metrics")
    async def cancel(job: awa.Job[Any]) -> awa.Cancel:
        return awa.Cancel("not wanted")

    @client.task(None, kind="snooze", queue="metrics")
    async def snooze(job: awa.Job[Any]) -> awa.Snooze | None:
        if job.id in snoozed:
            return None
        snoozed.add(job.id)
        return awa.Snooze(0.01)

    @client.task(None, kind="stale", queue="metrics")
    async def stale(job: awa.Job[Any]) -> None:
        # Another process took the lease (and heartbeats it: silent since its claim, a
        # rescue would give its attempt back). Blocking on purpose: no heartbeat can run
        # between this and the return, so the outcome is the one refused as stale.
        db.execute(
            "UPDATE awa.jobs SET run_lease = run_lease + 1, heartbeat_at = now() WHERE id = %s",
            (job.id,),
        )

    @client.task(None, kind="gate", queue="metrics")
    async def gated(job: awa.Job[Any]) -> None:
        await gate.wait()


async def insert_workload(client: awa.AsyncClient, db: psycopg.Connection[Any]) -> None:
    # A job claimed by a worker that died: running, silent for an hour (after heartbeats
    # since its claim), last attempt.
    ghost = await client.insert({}, kind="ghost", queue="elsewhere", max_attempts=1)
    db.execute(
        "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
        "heartbeat_at = now() - interval '1 hour', attempted_at = now() - interval '2 hours' "
        "WHERE id = %s",
        (ghost.id,),
    )
    await client.insert({}, kind="gate", queue="metrics")
    await client.insert_many([{"n": i} for i in range(5)], kind="ok", queue="metrics")
    await client.insert({}, kind="boom", queue="metrics", max_attempts=2)
    await client.insert({}, kind="terminal", queue="metrics")
    await client.insert({}, kind="cancel", queue="metrics")
    await client.insert({}, kind="snooze", queue="metrics")
    await client.insert({}, kind="stale", queue="metrics", max_attempts=1)
    await client.insert_many([{"n": i} for i in range(3)], kind="ok", queue="limited")


def settled(series: Series) -> bool:
    outcomes = by_label(series, "awa_jobs_total", "queue", "kind", "outcome")
    rescued = by_label(series, "awa_jobs_rescued_total", "queue", "kind", "reason")
    return outcomes == EXPECTED_OUTCOMES and len(rescued) == 2


async def test_metrics_scraped_over_http_count_what_ran(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="awa")
    gate = asyncio.Event()
    register(client, db, gate)
    metrics = awa.metrics.instrument(client, otel_enabled=False, stats_max_age_s=0)
    server = metrics.serve(port=0)
    await insert_workload(client, db)
    queues = [
        awa.QueueConfig("metrics", min_workers=MIN_WORKERS["metrics"]),
        awa.QueueConfig("limited", min_workers=MIN_WORKERS["limited"], rate_limit=(50.0, 1)),
    ]
    await client.start(queues, global_max_workers=GLOBAL_MAX, **FAST_WORKER)
    try:
        series = await wait_for(lambda: _scrape_if(server.url, settled))
        await _check_counters(series)
        # Only the gated job still runs: the gauges say so, and agree with queue_stats().
        series = await scrape(server.url)
        _check_gauges(series, await client.queue_stats(), in_flight={"metrics": 1})
        assert value(series, "awa_overrides_applied_total", queue="metrics") is None

        await client.set_runtime_overrides("metrics", deadline_ms=0)  # crosses zero: refused
        await client.set_runtime_overrides("limited", poll_interval_ms=100)
        series = await wait_for(lambda: _scrape_if(server.url, _overrides_seen))
        assert value(series, "awa_overrides_applied_total", queue="limited") == 1
        ignored = by_label(series, "awa_overrides_ignored_total", "queue", "setting")
        assert ignored == {("metrics", "deadline_ms"): 1}
        active = by_label(series, "awa_overrides_ignored_active", "queue", "setting")
        assert active == {("metrics", "deadline_ms"): 1}

        gate.set()
        series = await wait_for(
            lambda: _scrape_if(
                server.url,
                lambda s: (
                    value(s, "awa_jobs_total", queue="metrics", kind="gate", outcome="completed")
                    == 1
                ),
            )
        )
        _check_gauges(series, await client.queue_stats(), in_flight={"metrics": 0})
    finally:
        await client.shutdown()
        server.stop()
    _check_records(caplog.records)


async def test_handlers_the_worker_stopped_are_counted_by_reason(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A stop is no outcome of its own (a deadline's is ``retried``, a cancel's was written
    by the operator): without this counter, no series said why handlers were stopped."""
    started: dict[str, int] = {}

    async def waits_started() -> bool:
        return "waits" in started

    @client.task(None, kind="overrun", queue="short")
    async def overrun(job: awa.Job[Any]) -> None:
        await asyncio.Event().wait()

    @client.task(None, kind="waits", queue="long")
    async def waits(job: awa.Job[Any]) -> None:
        started["waits"] = job.id
        await asyncio.Event().wait()

    @client.task(None, kind="quick", queue="long")
    async def quick(job: awa.Job[Any]) -> None:
        return None

    metrics = awa.metrics.instrument(client, otel_enabled=False, stats_max_age_s=0)
    server = metrics.serve(port=0)
    await client.insert({}, kind="overrun", queue="short", max_attempts=1)
    await client.insert({}, kind="waits", queue="long")
    await client.insert({}, kind="quick", queue="long")
    queues = [awa.QueueConfig("short", deadline_ms=300), awa.QueueConfig("long")]
    await client.start(queues, **FAST_WORKER)
    try:
        await wait_for(waits_started)
        await client.cancel(started["waits"])

        def stopped(series: Series) -> bool:  # and the deadline's outcome written (after)
            failed = value(
                series, "awa_jobs_total", queue="short", kind="overrun", outcome="failed"
            )
            stops = by_label(series, "awa_jobs_stopped_total", "queue", "kind", "reason")
            return len(stops) == 2 and failed is not None

        series = await wait_for(lambda: _scrape_if(server.url, stopped))
        assert by_label(series, "awa_jobs_stopped_total", "queue", "kind", "reason") == {
            ("short", "overrun", "deadline"): 1,
            ("long", "waits", "cancelled"): 1,
        }
        assert value(series, "awa_jobs_total", queue="short", kind="overrun", outcome="failed") == 1
    finally:
        await client.shutdown()
        server.stop()


async def _scrape_if(url: str, predicate: Any) -> Series | None:
    series = await scrape(url)
    return series if predicate(series) else None


def _overrides_seen(series: Series) -> bool:
    return (
        value(series, "awa_overrides_applied_total", queue="limited") == 1
        and value(series, "awa_overrides_ignored_active", queue="metrics", setting="deadline_ms")
        == 1
    )


async def _check_counters(series: Series) -> None:
    assert by_label(series, "awa_jobs_rescued_total", "queue", "kind", "reason") == {
        ("metrics", "stale", "heartbeat"): 1,
        ("elsewhere", "ghost", "heartbeat"): 1,
    }
    assert by_label(series, "awa_completions_stale_total", "queue", "kind") == {
        ("metrics", "stale"): 1
    }
    assert by_label(series, "awa_jobs_claimed_total", "queue") == {
        ("metrics",): ATTEMPTS["metrics"],
        ("limited",): ATTEMPTS["limited"],
    }
    # burst 1 and 3 jobs waiting: the first poll is cut short by the limiter.
    assert (value(series, "awa_polls_rate_limited_total", queue="limited") or 0) >= 1
    assert value(series, "awa_polls_rate_limited_total", queue="metrics") is None
    for queue, attempts in ATTEMPTS.items():
        # The gated job has started but not finished.
        finished = attempts - (1 if queue == "metrics" else 0)
        assert value(series, "awa_job_pickup_latency_seconds_count", queue=queue) == attempts
        assert value(series, "awa_job_duration_seconds_count", queue=queue) == finished
        for name in ("awa_job_pickup_latency_seconds", "awa_job_duration_seconds"):
            assert (value(series, f"{name}_sum", queue=queue) or 0) >= 0
            buckets = {dict(labels)["le"] for (n, labels) in series if n == f"{name}_bucket"}
            assert {"0.001", "300.0", "+Inf"} <= buckets
            total = value(series, f"{name}_bucket", queue=queue, le="+Inf")
            assert total == value(series, f"{name}_count", queue=queue)


def _check_gauges(series: Series, stats: list[awa.QueueStat], in_flight: Mapping[str, int]) -> None:
    overflow_total = GLOBAL_MAX - sum(MIN_WORKERS.values())
    for stat in stats:
        for state in spec.DEPTH_STATES:
            assert value(series, "awa_queue_depth", queue=stat.queue, state=state) == getattr(
                stat, state
            ), (stat.queue, state)
        lag = value(series, "awa_queue_lag_seconds", queue=stat.queue)
        assert lag == 0 if stat.lag_seconds is None else lag is not None and lag >= 0
        assert value(series, "awa_queue_paused", queue=stat.queue) == 0
    assert value(series, "awa_queue_depth", queue="elsewhere", state="failed") == 1
    assert value(series, "awa_queue_depth", queue="metrics", state="running") == sum(
        in_flight.values()
    )
    for queue, minimum in MIN_WORKERS.items():
        assert value(series, "awa_queue_in_flight", queue=queue) == in_flight.get(queue, 0)
        assert value(series, "awa_queue_capacity", queue=queue) == minimum + overflow_total
        assert value(series, "awa_queue_overflow_held", queue=queue) == 0


def _check_records(records: list[logging.LogRecord]) -> None:
    def events(name: str) -> list[logging.LogRecord]:
        return [r for r in records if getattr(r, "event", None) == name]

    started = events("job_started")
    assert len(started) == sum(ATTEMPTS.values())
    for record in started + events("job_finished"):
        assert record.levelno == logging.DEBUG
        assert {"queue", "kind", "job_id", "run_lease", "attempt"} <= record.__dict__.keys()
    assert {r.kind for r in started} >= {"ok", "boom", "terminal", "cancel", "snooze"}  # type: ignore[attr-defined]
    (retried,) = events("job_retried")
    assert retried.levelno == logging.INFO and retried.kind == "boom"  # type: ignore[attr-defined]
    assert "boom on attempt 1" in retried.getMessage()
    failed = events("job_failed")
    assert {(r.kind, r.levelno) for r in failed} == {  # type: ignore[attr-defined]
        ("boom", logging.WARNING),
        ("terminal", logging.WARNING),
    }
    (stale,) = events("outcome_stale")
    assert stale.levelno == logging.INFO and stale.kind == "stale"  # type: ignore[attr-defined]
    rescued = events("job_rescued")
    assert {(r.queue, r.kind, r.reason) for r in rescued} == {  # type: ignore[attr-defined]
        ("metrics", "stale", "heartbeat"),
        ("elsewhere", "ghost", "heartbeat"),
    }
    (ignored,) = events("override_ignored")
    assert ignored.levelno == logging.WARNING and ignored.queue == "metrics"  # type: ignore[attr-defined]
    assert events("worker_started") and events("worker_stopped") and events("leader_elected")


async def test_otel_instruments_mirror_prometheus(client: awa.AsyncClient) -> None:
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    @client.task(None, kind="ok", queue="otel")
    async def ok(job: awa.Job[Any]) -> None:
        return None

    @client.task(None, kind="terminal", queue="otel")
    async def terminal(job: awa.Job[Any]) -> None:
        raise awa.TerminalError("no")

    metrics = awa.metrics.instrument(client, meter_provider=provider)
    assert metrics.otel_enabled
    await client.insert_many([{}, {}], kind="ok", queue="otel")
    await client.insert({}, kind="terminal", queue="otel")
    await client.start([("otel", 2)], **FAST_WORKER)
    try:
        await wait_for(lambda: _otel_points(reader, "awa.jobs", want=3))
        await metrics.refresh(force=True)
        points = _otel_points_now(reader)
    finally:
        await client.shutdown()
        provider.shutdown()
    jobs = {(p.attributes["kind"], p.attributes["outcome"]): p.value for p in points["awa.jobs"]}
    assert jobs == {("ok", "completed"): 2, ("terminal", "failed"): 1}
    (duration,) = points["awa.job.duration"]
    assert duration.count == 3 and duration.attributes == {"queue": "otel"}
    assert tuple(duration.explicit_bounds) == spec.SECONDS_BUCKETS
    depth = {p.attributes["state"]: p.value for p in points["awa.queue.depth"]}
    assert depth["failed"] == 1 and depth["available"] == 0
    (in_flight,) = points["awa.queue.in_flight"]
    assert in_flight.value == 0
    (capacity,) = points["awa.queue.capacity"]
    assert capacity.value == 2


async def test_otel_gauges_keep_nothing_per_queue_that_went(client: awa.AsyncClient) -> None:
    """The OTel mirror cached the attributes of every queue it ever observed, for the
    life of the process: ~1 KiB per queue a tenant-per-queue app ever had (a review of
    long runs). Gauges' attributes are made afresh at each collection."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from awa.metrics.otel import OtelRecorder

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = awa.metrics.instrument(client, meter_provider=provider)
    try:
        for i in range(30):
            job = await client.insert({}, kind="k", queue=f"tenant-{i}")
            await metrics.refresh(force=True)
            depth = _otel_points_now(reader)["awa.queue.depth"]
            assert {p.attributes["queue"] for p in depth} >= {f"tenant-{i}"}
            await client.cancel(job.id)
    finally:
        provider.shutdown()
    (recorder,) = [r for r in metrics.observer._recorders if isinstance(r, OtelRecorder)]
    assert len(recorder._attributes) == 0  # no counter or histogram was recorded here


async def test_two_instrumented_clients_keep_their_own_otel_instruments(
    client: awa.AsyncClient, database_url: str
) -> None:
    """Two clients' recorders in one process shared the meter ``awa``: the SDK kept the
    first recorder's gauge callbacks and dropped the second's, and summed their counters
    (a review of several databases in one process). Each recorder has a meter of its own,
    named by its database."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    other = awa.AsyncClient(database_url)
    for each, queue in ((client, "email"), (other, "reports")):
        each.task(None, kind=f"k_{queue}", queue=queue)(_noop)
        awa.metrics.instrument(each, meter_provider=provider)
    await client.start([("email", 10)], **FAST_WORKER)
    await other.start([("reports", 20)], **FAST_WORKER)
    try:
        data = reader.get_metrics_data()
    finally:
        await client.shutdown()
        await other.shutdown()
        await other.close()
        provider.shutdown()
    capacity: dict[str, float] = {}
    scopes = set()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "awa.queue.capacity":
                    scopes.add(scope.scope.attributes["awa.meter"])
                    for point in metric.data.data_points:
                        capacity[point.attributes["queue"]] = point.value
    assert capacity == {"email": 10, "reports": 20} and len(scopes) == 2


async def test_a_closed_clients_otel_gauges_are_no_longer_exported(database_url: str) -> None:
    """An OTel meter keeps a recorder's gauge callbacks: a client closed (replaced by
    another, as each dashboard lifespan does) exported its last values for ever beside
    its successor's (a review)."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    old = awa.AsyncClient(database_url)
    await old.insert({}, kind="k", queue="email")
    metrics = awa.metrics.instrument(old, meter_provider=provider)
    await metrics.refresh(force=True)
    assert _otel_points_now(reader)["awa.queue.depth"]  # while open
    await old.close()
    try:
        assert not _otel_points_now(reader).get("awa.queue.depth")
    finally:
        provider.shutdown()


def test_each_otel_recorder_has_a_meter_of_its_own_by_name() -> None:
    """Before an SDK provider is set, the API's proxy provider drops a meter's attributes:
    recorders told apart by attributes alone shared one meter once it was set (a review).
    The first recorder keeps the name ``awa``; the next ones are named apart."""
    from awa.metrics import otel

    asked: list[str] = []

    class Provider:
        def get_meter(self, name: str, version: str, attributes: Any = None) -> Any:
            asked.append(name)
            from opentelemetry.metrics import NoOpMeter

            return NoOpMeter(name)

    for _ in range(2):
        otel.OtelRecorder(Provider(), dict, "h:5432/db")
    assert len(set(asked)) == 2 and all(n.startswith("awa") for n in asked)


async def _noop(job: awa.Job[Any]) -> None:
    return None


def _otel_points_now(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


async def _otel_points(reader: Any, name: str, want: int) -> bool:
    return sum(p.value for p in _otel_points_now(reader).get(name, [])) >= want


@contextlib.contextmanager
def _worker_command(database_url: str, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """``awa worker`` of the test app with ``flags``, its stderr piped; killed if the test
    leaves it running."""
    env = {**os.environ, "AWA_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "awa", "worker", "tests.apps.worker_app:client", *flags]
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stderr is not None
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def test_worker_command_serves_metrics(database_url: str) -> None:
    with _worker_command(database_url, "--queue", "chaos=2", "--metrics-port", "0") as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("awa: metrics on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].strip()
        assert "worker running" in proc.stderr.readline()
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read()
        series = parse(body)
        assert value(series, "awa_queue_capacity", queue="chaos") == 2
        assert value(series, "awa_queue_in_flight", queue="chaos") == 0
        names = {f.name for f in text_string_to_metric_families(body.decode())}
        assert {i.name for i in spec.ALL} <= names
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_worker_command_writes_json_logs_when_asked(database_url: str) -> None:
    """Without the flags, the awa logger's INFO records (retries, rescues, leadership)
    reached nothing unless the application configured logging."""
    with _worker_command(database_url, "--queue", "chaos=1", "--log-format", "json") as proc:
        assert proc.stderr is not None
        lines = [proc.stderr.readline() for _ in range(2)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    started = json.loads(next(line for line in lines if line.startswith("{")))
    assert started["level"] == "INFO" and started["event"] == "worker_started"


def test_worker_command_refuses_a_bad_metrics_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["worker", "m:c", "--metrics-port", "-1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--metrics-port" in err and len(err.strip().splitlines()) == 1


async def test_asgi_app_serves_queue_gauges_without_a_worker(client: awa.AsyncClient) -> None:
    await client.insert_many([{}, {}], kind="k", queue="waiting")
    app = awa.metrics.asgi_app(client)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await app({"type": "http", "method": "GET", "path": "/metrics"}, receive, send)
    start, body = sent
    assert start["status"] == 200
    assert dict(start["headers"])[b"content-type"].startswith(b"text/plain")
    series = parse(body["body"])
    assert value(series, "awa_queue_depth", queue="waiting", state="available") == 2
    assert (value(series, "awa_queue_lag_seconds", queue="waiting") or 0) >= 0
    assert not any(name == "awa_queue_in_flight" for name, _ in series)  # no worker here
    sent.clear()
    await app({"type": "http", "method": "POST", "path": "/metrics"}, receive, send)
    assert sent[0]["status"] == 405


def test_docs_and_dashboard_name_only_real_metrics() -> None:
    root = Path(__file__).resolve().parents[2] / "docs"
    page = (root / "metrics.md").read_text()
    for instrument in spec.ALL:
        assert f"`{instrument.exposed_name}`" in page, instrument.name
        assert f"`{instrument.otel_name}`" in page, instrument.otel_name
    dashboard = json.loads((root / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    used = set(re.findall(r"\bawa_[a-z_]+", " ".join(exprs)))
    exposed = {i.exposed_name for i in spec.ALL} | {f"{i.name}_bucket" for i in spec.HISTOGRAMS}
    assert used <= exposed, used - exposed
    wanted = {"awa_jobs_total", "awa_job_pickup_latency_seconds_bucket",
              "awa_job_duration_seconds_bucket", "awa_queue_depth", "awa_queue_lag_seconds",
              "awa_queue_in_flight", "awa_queue_capacity", "awa_queue_overflow_held",
              "awa_polls_rate_limited_total", "awa_overrides_ignored_active",
              "awa_fleet_running", "awa_fleet_holds_total", "awa_fleet_pool_total"}  # fmt: skip
    assert wanted <= used


async def test_dashboard_serves_metrics(client: awa.AsyncClient, database_url: str) -> None:
    from awa.dashboard.app import DashboardSettings, create_app

    await client.insert({}, kind="k", queue="shown")
    app = create_app(DashboardSettings(database_url=database_url))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http", "method": "GET", "path": "/metrics", "raw_path": b"/metrics",
        "root_path": "", "scheme": "http", "query_string": b"", "http_version": "1.1",
        "headers": [(b"host", b"127.0.0.1:8000")], "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000), "app": app,
    }  # fmt: skip
    try:
        await app(scope, receive, send)
    finally:
        await app.state.dashboard.client.close()
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 200, body
    assert value(parse(body), "awa_queue_depth", queue="shown", state="available") == 1


def test_sync_client_metrics_render_and_serve(sync_client: awa.Client) -> None:
    @sync_client.task(None, kind="ok", queue="sync")
    def ok(job: awa.Job[Any]) -> None:
        return None

    metrics = awa.metrics.instrument(sync_client, otel_enabled=False, stats_max_age_s=0)
    sync_client.insert_many([{}, {}, {}], kind="ok", queue="sync")
    with metrics.serve(port=0) as server:
        sync_client.start([("sync", 2)], **FAST_WORKER)
        try:
            with pytest.raises(awa.ValidationError, match="before start"):
                awa.metrics.instrument(sync_client)

            def done() -> Series | None:
                with urllib.request.urlopen(server.url, timeout=10) as response:
                    series = parse(response.read())
                completed = value(
                    series, "awa_jobs_total", queue="sync", kind="ok", outcome="completed"
                )
                return series if completed == 3 else None

            series = wait_until(done)
        finally:
            sync_client.shutdown()
    assert value(series, "awa_job_duration_seconds_count", queue="sync") == 3
    # render() from a thread without an event loop reads queue_stats() itself.
    rendered = parse(metrics.render())
    assert value(rendered, "awa_queue_depth", queue="sync", state="available") == 0
    assert value(rendered, "awa_queue_in_flight", queue="sync") is None  # worker stopped


def test_without_opentelemetry_the_mirror_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from awa.metrics import otel

    monkeypatch.setattr(otel, "otel_metrics", None)
    assert not otel.available() and not otel.configured()
    assert not awa.metrics.Metrics(None).otel_enabled
    with pytest.raises(awa.MissingExtra, match="opentelemetry-api is not installed"):
        awa.metrics.Metrics(None, otel_enabled=True)


async def test_a_start_is_no_override_and_unread_statistics_are_no_zeros(
    client: awa.AsyncClient,
) -> None:
    """With no override stored, a fleet-limited queue counted one "override applied" at
    every start (a child's restart too); render() on the loop before any statistics
    were read showed every depth as 0 though jobs waited (a review)."""
    await client.set_queue_limits("capped", concurrency=1, rate_limit=2.0)
    await client.insert({}, kind="nobody", queue="capped")  # no handler: it waits
    noop = client.task(None, kind="k", queue="plain")
    noop(lambda job: None)
    metrics = awa.metrics.instrument(client, otel_enabled=False)
    await client.start(["plain", "capped"], **FAST_WORKER)
    try:
        unread = parse(metrics.render())  # on the loop: it cannot read them
        assert not any(name == "awa_queue_depth" for name, _ in unread)
        series = parse(await metrics.scrape())
        assert value(series, "awa_queue_depth", queue="capped", state="available") == 1
        assert value(series, "awa_overrides_applied_total", queue="capped") is None
        assert value(series, "awa_overrides_applied_total", queue="plain") is None
    finally:
        await client.shutdown()
