"""The supervisor's pure parts: restart delays, exit descriptions, the child's command
line, and the merge of the children's metrics."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import awa
from awa.cli.commands.worker import child_command
from awa.cli.main import build_parser, main
from awa.config import build_worker_config
from awa.metrics import gauges
from awa.metrics.gauges import STATS_TIMEOUT_S, StatsCache
from awa.metrics.http import MetricsServer
from awa.metrics.supervised import SCRAPE_TIMEOUT_S, SHARED, FleetMetrics, merge
from awa.supervisor import describe_exit, restart_delay
from awa.supervisor.process import Child
from awa.worker.runtime import SNAPSHOT_WAIT_S
from tests.helpers import wait_until

# Not on a child's command line: the supervisor's own, and the listen URL (a password
# stays out of the process list: it reaches the children as AWA_LISTEN_URL).
SUPERVISOR_ONLY = {"processes", "metrics_port", "metrics_host", "listen_url"}


def test_restart_delay_doubles_per_quick_failure_up_to_30_s() -> None:
    assert [restart_delay(n) for n in range(9)] == [0.5, 0.5, 1, 2, 4, 8, 16, 30, 30]


def test_exits_are_described_by_status_or_signal() -> None:
    assert describe_exit(1) == "exited with status 1"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-99) == "was killed by signal 99"


def _worker_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["worker", "app:client", *argv])


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--queue", "a=2", "--queue", "b=5"],
        ["--queue", "a:min=2,weight=3", "--queue", "b", "--global-max-workers", "9"],
        ["--shutdown-timeout-ms", "700", "--max-connections", "3", "--metrics-port", "9464",
         "--metrics-host", "0.0.0.0", "--listen-url", "postgresql://u:pw@db/app"],
        ["--set", "heartbeat_interval_ms=500", "--set", "synchronous_commit=on"],
        ["--log-level", "debug", "--log-format", "json"],
    ],
)  # fmt: skip
def test_a_child_runs_the_same_worker_without_the_supervisor_options(argv: list[str]) -> None:
    given = _worker_args("--processes", "3", *argv)
    command = child_command(given)
    child = build_parser().parse_args(command)
    assert child.processes is None
    assert not any("pw@" in part for part in command)
    for name, value in vars(given).items():
        if name not in SUPERVISOR_ONLY and not callable(value) and name != "leaf_parser":
            assert getattr(child, name) == value, name  # every worker option is forwarded
    if given.metrics_port is None:
        assert child.metrics_port is None
    else:  # a loopback port of its own, which the supervisor scrapes
        assert (child.metrics_port, child.metrics_host) == (0, "127.0.0.1")


def test_weighted_queue_flags_give_each_queue_its_minimum_and_weight() -> None:
    args = _worker_args("--global-max-workers", "9", "--queue", "a:min=2,weight=3",
                        "--queue", "b:weight=2", "--queue", "c")  # fmt: skip
    config = build_worker_config(
        [flag.config() for flag in args.queues], global_max_workers=args.global_max_workers
    )
    shares = {q.name: (q.min_workers, q.weight) for q in config.queues}
    assert shares == {"a": (2, 3), "b": (0, 2), "c": (0, 1)}
    hard = _worker_args("--queue", "a=4")
    assert [flag.config() for flag in hard.queues] == [{"name": "a", "max_workers": 4}]


def _exposition(completed: int, in_flight: int, depth: int) -> str:
    return (
        "# HELP awa_jobs_total Jobs.\n# TYPE awa_jobs_total counter\n"
        f'awa_jobs_total{{queue="q",kind="k",outcome="completed"}} {completed}\n'
        "# HELP awa_queue_in_flight Running here.\n# TYPE awa_queue_in_flight gauge\n"
        f'awa_queue_in_flight{{queue="q"}} {in_flight}\n'
        "# HELP awa_queue_depth Jobs per state.\n# TYPE awa_queue_depth gauge\n"
        f'awa_queue_depth{{queue="q",state="available"}} {depth}\n'
    )


def test_merge_labels_each_process_and_keeps_database_gauges_once() -> None:
    merged = merge([(0, _exposition(5, 2, 40)), (3, _exposition(7, 1, 41))])
    samples = {family.name: family.samples for family in merged}
    jobs = {s.labels["process"]: s.value for s in samples["awa_jobs"]}
    assert jobs == {"0": 5.0, "3": 7.0}
    assert {s.labels["process"]: s.value for s in samples["awa_queue_in_flight"]} == {
        "0": 2.0,
        "3": 1.0,
    }
    (depth,) = samples["awa_queue_depth"]
    assert depth.value == 40.0 and "process" not in depth.labels
    # The merged families render and parse back.
    from prometheus_client import CollectorRegistry, generate_latest

    class Collected:
        def collect(self) -> list[object]:
            return list(merged)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collected())  # type: ignore[arg-type]
    names = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert names == {"awa_jobs", "awa_queue_in_flight", "awa_queue_depth"}


def test_merge_takes_database_gauges_from_a_child_that_has_them() -> None:
    """A child that has not read the statistics yet (just restarted, its read slow)
    serves the family empty; taken from it, the fleet's depth vanished."""
    empty = _exposition(1, 1, 0).replace('awa_queue_depth{queue="q",state="available"} 0\n', "")
    merged = merge([(0, empty), (1, _exposition(2, 2, 40)), (2, _exposition(3, 3, 41))])
    samples = {family.name: family.samples for family in merged}
    (depth,) = samples["awa_queue_depth"]
    assert depth.value == 40.0 and "process" not in depth.labels
    assert {s.labels["process"] for s in samples["awa_queue_in_flight"]} == {"0", "1", "2"}


def test_merge_keeps_later_childrens_own_series_and_drops_their_database_gauges() -> None:
    """Every shared family taken: the rest of each later child's copy is never parsed,
    and what it says otherwise is kept (its own in-flight)."""

    def child(value: int, in_flight: int) -> str:
        shared = "".join(
            f'# HELP {name} x\n# TYPE {name} gauge\n{name}{{queue="q"}} {value}\n'
            for name in sorted(SHARED)
        )
        return (
            f"{shared}# HELP awa_queue_in_flight x\n# TYPE awa_queue_in_flight gauge\n"
            f'awa_queue_in_flight{{queue="q"}} {in_flight}\n'
        )

    merged = merge([(0, child(7, 1)), (1, child(9, 2))])
    samples = {family.name: family.samples for family in merged}
    assert all([s.value for s in samples[name]] == [7.0] for name in SHARED)
    assert {s.labels["process"]: s.value for s in samples["awa_queue_in_flight"]} == {
        "0": 1.0,
        "1": 2.0,
    }


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--processes", "0"], "--processes"),
        (["--processes", "many"], "--processes"),
        (["--max-connections", "0"], "--max-connections"),
        (["--listen-url", "http://u:s3cret@example.com/db"], "--listen-url"),
    ],
)
def test_bad_worker_flags_exit_2_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "app:client", *argv])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"awa: error: argument {flag}: ") and "s3cret" not in line


def test_a_bad_target_stops_the_supervisor_before_any_child(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", "no_such_module_xyz:client", "--processes", "2"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("awa: error: argument MODULE:CLIENT: ")


class _SlowChild:
    """A child's metrics that answer as a child with a slow database does: after its own
    wait for fresh statistics (STATS_TIMEOUT_S), with the last ones."""

    def __init__(self) -> None:
        self.asked = threading.Event()

    def render(self) -> bytes:
        self.asked.set()
        # Stands for the child's waits, not a sync: for statistics, then for the snapshot
        # of a worker whose event loop is blocked.
        time.sleep(STATS_TIMEOUT_S + SNAPSHOT_WAIT_S + 0.1)
        return b"# TYPE awa_jobs_in_flight gauge\nawa_jobs_in_flight 3.0\n"


def test_the_supervisor_waits_for_a_child_answering_with_its_last_statistics() -> None:
    """With both waits 2 s, the child's fallback came just too late and every child of a
    fleet on a slow database read as down; a child whose loop is blocked also waits for
    its worker's snapshot, and flapped between up and down (reviews)."""
    assert SCRAPE_TIMEOUT_S > STATS_TIMEOUT_S + SNAPSHOT_WAIT_S
    with MetricsServer(_SlowChild(), port=0) as child:
        children = [Child(0, metrics_url=child.url, ready=True)]
        text = FleetMetrics(lambda: children).render().decode()
    assert 'awa_supervisor_process_up{process="0"} 1.0' in text
    assert 'awa_jobs_in_flight{process="0"} 3.0' in text


def test_a_scraper_that_leaves_early_costs_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    renderer = _SlowChild()
    before = set(threading.enumerate())
    with MetricsServer(renderer, port=0) as server:
        host, port = server.url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port))) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert renderer.asked.wait(10)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # The reply goes to a reset connection once the request's thread is done rendering.
    wait_until(lambda: not any(t.is_alive() for t in set(threading.enumerate()) - before))
    assert "Traceback" not in capfd.readouterr().err


class _SlowDatabase(awa.Client):
    """A blocking client whose queue_stats() waits for the test, then fails (a database
    too slow to answer): no connection, the metrics' cache is what is tested."""

    def __init__(self) -> None:  # no pool: queue_stats() is all the cache calls
        self.reads = 0
        self.answer = threading.Event()

    def queue_stats(self) -> list[awa.QueueStat]:
        self.reads += 1
        self.answer.wait(10)
        raise awa.DatabaseError("statement timeout")


def test_a_scrape_behind_a_failing_read_serves_the_last_values_without_another() -> None:
    """Two scrapes at once on a slow database each waited a full timeout in turn, the
    second past its scraper's patience (a review: the supervisor read the child as down).
    The second now serves what the first read left."""
    slow = _SlowDatabase()
    cache = StatsCache(slow, timeout_s=10)
    first = threading.Thread(target=cache.ensure_fresh)
    first.start()
    wait_until(lambda: slow.reads == 1)
    second = threading.Thread(target=cache.ensure_fresh)
    second.start()
    slow.answer.set()
    first.join(10)
    second.join(10)
    assert slow.reads == 1


class _FlakyDatabase(awa.Client):
    """A blocking client whose queue_stats() fails until the test heals it."""

    def __init__(self) -> None:  # no pool: queue_stats() is all the cache calls
        self.reads = 0
        self.failing = True

    def queue_stats(self) -> list[awa.QueueStat]:
        self.reads += 1
        if self.failing:
            raise awa.DatabaseError("statement timeout")
        return []


def test_scrapes_served_from_the_cache_do_not_put_off_the_next_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each scrape that served the cache after a failed read moved "last tried" on, so
    scrapes more frequent than max_age_s never read again: stale statistics for good
    once the database was back (a review)."""
    now = [100.0]
    monkeypatch.setattr(gauges.time, "monotonic", lambda: now[0])
    database = _FlakyDatabase()
    cache = StatsCache(database, max_age_s=1.0)
    cache.ensure_fresh()  # fails
    database.failing = False
    for at in (100.5, 100.9):  # within max_age_s of the failure: served from the cache
        now[0] = at
        cache.ensure_fresh()
    assert database.reads == 1
    now[0] = 101.2  # max_age_s after the failed read, not after the last scrape
    cache.ensure_fresh()
    assert database.reads == 2 and cache.fresh()


class _SlowAsyncDatabase:
    """An async client whose queue_stats() answers when the test lets it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reads = 0
        self.answer = asyncio.Event()
        self.loop = loop

    async def queue_stats(self) -> list[awa.QueueStat]:
        self.reads += 1
        await self.answer.wait()
        return [awa.QueueStat("q", *([0] * 9), None, False, 0)]  # type: ignore[arg-type]


def test_a_read_slower_than_the_scrape_goes_on_and_serves_the_next_scrape() -> None:
    """Cancelled at each scrape's timeout, a read slower than it never completed: depth,
    lag and pause were never served at all (a review, 7 M retained jobs, 3 processes)."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        database = _SlowAsyncDatabase(loop)
        cache = StatsCache(database, max_age_s=0.0, timeout_s=0.05)
        cache.bind(loop)
        cache.ensure_fresh()  # gives up waiting; the read goes on
        assert cache.stats == [] and database.reads == 1
        cache.ensure_fresh()  # finds that read still under way: no second one
        assert database.reads == 1
        loop.call_soon_threadsafe(database.answer.set)
        wait_until(lambda: [s.queue for s in cache.stats] == ["q"])
        assert database.reads == 1
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()


def test_families_already_taken_are_dropped_from_later_children_before_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dropped as soon as each is taken, not once every shared family is: a fleet without
    a rate limit or a pool serves those families empty, and then every child's copy of
    thousands of queues was parsed (a review: 1.47 s against 0.41 s for 4 children)."""
    from awa.metrics import supervised

    parsed: list[str] = []
    real_parse = supervised.text_string_to_metric_families

    def parse(text: str) -> Any:
        parsed.append(text)
        return real_parse(text)

    monkeypatch.setattr(supervised, "text_string_to_metric_families", parse)
    merge([(0, _exposition(1, 1, 40)), (1, _exposition(2, 2, 41))])
    assert "awa_queue_depth{" in parsed[0]
    assert "awa_queue_depth" not in parsed[1] and 'awa_queue_in_flight{queue="q"} 2' in parsed[1]


class _Child:
    """A child's metrics: its own in-flight, and depth when asked for the statistics
    (``depth`` None: it has not read them yet)."""

    def __init__(self, in_flight: int, depth: int | None) -> None:
        self.in_flight, self.depth = in_flight, depth
        self.with_stats = 0

    def render(self, *, stats: bool = True) -> bytes:
        text = (
            "# HELP awa_queue_in_flight x\n# TYPE awa_queue_in_flight gauge\n"
            f'awa_queue_in_flight{{queue="q"}} {self.in_flight}\n'
        )
        if stats:
            self.with_stats += 1
            text += "# HELP awa_queue_depth x\n# TYPE awa_queue_depth gauge\n"
            if self.depth is not None:
                text += f'awa_queue_depth{{queue="q",state="available"}} {self.depth}\n'
        return text.encode()


def _fleet_scrape(children: list[_Child]) -> tuple[FleetMetrics, Callable[[], dict[str, Any]]]:
    servers = [MetricsServer(c, port=0).start() for c in children]
    placed = [Child(i, metrics_url=s.url, ready=True) for i, s in enumerate(servers)]
    fleet = FleetMetrics(lambda: placed)

    def scrape() -> dict[str, Any]:
        text = fleet.render().decode()
        return {f.name: f.samples for f in text_string_to_metric_families(text)}

    scrape.servers = servers  # type: ignore[attr-defined]
    return fleet, scrape


def test_one_child_is_asked_for_the_statistics_the_same_from_scrape_to_scrape() -> None:
    """Each child read queue_stats() for every supervisor scrape: N queries where one
    gives the same numbers (a review: 1.4 s each with 7 M retained jobs)."""
    children = [_Child(1, 40), _Child(2, 40), _Child(3, 40)]
    _, scrape = _fleet_scrape(children)
    try:
        for _ in range(2):
            samples = scrape()
            assert [s.value for s in samples["awa_queue_depth"]] == [40.0]
            assert len(samples["awa_queue_in_flight"]) == 3
        assert [c.with_stats for c in children] == [2, 0, 0]
    finally:
        for server in scrape.servers:  # type: ignore[attr-defined]
            server.stop()


def test_when_the_asked_child_has_no_statistics_the_next_one_is_asked() -> None:
    children = [_Child(1, None), _Child(2, 7), _Child(3, 9)]
    _, scrape = _fleet_scrape(children)
    try:
        samples = scrape()
        assert [s.value for s in samples["awa_queue_depth"]] == [7.0]
        assert {s.labels["process"] for s in samples["awa_queue_in_flight"]} == {"0", "1", "2"}
        samples = scrape()  # child 1 is asked from now on
        assert [s.value for s in samples["awa_queue_depth"]] == [7.0]
        assert [c.with_stats for c in children] == [1, 2, 0]
    finally:
        for server in scrape.servers:  # type: ignore[attr-defined]
            server.stop()


class _CountingDatabase(awa.Client):
    def __init__(self) -> None:  # no pool: queue_stats() is all the metrics call
        self.reads = 0

    def queue_stats(self) -> list[awa.QueueStat]:
        self.reads += 1
        return [awa.QueueStat("q", *([0] * 9), None, False, 0)]  # type: ignore[arg-type]

    def queue_limits_status(self, queue: str | None = None) -> list[Any]:
        return []

    def fleet_pool(self) -> None:
        return None


def test_a_render_without_statistics_reads_none() -> None:
    from awa.metrics.core import Metrics

    database = _CountingDatabase()
    metrics = Metrics(database, otel_enabled=False, stats_max_age_s=0)
    assert b"awa_queue_depth{" not in metrics.render(stats=False)
    assert database.reads == 0
    assert b"awa_queue_depth{" in metrics.render()
    assert database.reads == 1


def test_the_age_of_the_statistics_grows_while_they_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the database out of reach a scrape kept answering the last depth and pause,
    up and unremarkable for as long as the outage lasted (a review)."""
    from awa.metrics.core import Metrics

    now = [100.0]
    monkeypatch.setattr(gauges.time, "monotonic", lambda: now[0])
    monkeypatch.setattr("awa.metrics.core.time.monotonic", lambda: now[0])
    database = _CountingDatabase()
    metrics = Metrics(database, otel_enabled=False, stats_max_age_s=1)
    assert b"awa_queue_stats_age_seconds 0.0" in metrics.render()
    database.queue_stats = _refused  # type: ignore[method-assign]
    now[0] = 190.0
    assert b"awa_queue_stats_age_seconds 90.0" in metrics.render()
    assert database.reads == 1  # the depth served is that read's


def _refused() -> list[awa.QueueStat]:
    raise awa.DatabaseError("the database did not answer")


class _Fixed:
    def render(self, *, stats: bool = True) -> bytes:
        return b"awa_up 1\n"


def test_head_on_metrics_answers_like_get_without_a_body() -> None:
    """Uptime probes and load balancers check with HEAD; the server answered 501."""
    import http.client

    with MetricsServer(_Fixed(), port=0) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("HEAD", "/metrics")
        reply = conn.getresponse()
        assert (reply.status, reply.getheader("Content-Length"), reply.read()) == (200, "9", b"")
        conn.request("HEAD", "/elsewhere")
        assert conn.getresponse().status == 404
        conn.close()
