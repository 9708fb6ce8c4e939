"""One ``/metrics`` for the worker processes of a supervisor (``awa worker --processes N``).

Each child serves its own metrics on a loopback port it picked; a scrape of the
supervisor fetches them all (in parallel, ``timeout_s`` each) and merges them:

- what a process did or holds (counters, histograms, in-flight, capacity, …) gets a
  ``process`` label, the child's place ``0 … N-1``. The place survives restarts, so a
  restarted child's counters read as a counter reset of the same series, which
  ``rate()`` handles;
- the gauges of database-wide values (queue depth, lag, pause; the fleet limits, the
  fleet's running count and the fleet pool) are the same in every child: they are taken
  once, from the first child whose copy has samples, without the label. Depth, lag and
  pause cost each child a ``queue_stats()`` read: one child (the same from scrape to
  scrape) is asked for them, the others with ``?stats=0``; when its copy has none (just
  restarted, its read slow) the next child is asked;
- ``awa_supervisor_process_up{process}`` (1 when the child runs and answered) and
  ``awa_supervisor_restarts_total{process}`` describe the fleet itself.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Iterable, Sequence, Set
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from awa.metrics import spec
from awa.metrics.gauges import STATS_TIMEOUT_S
from awa.supervisor.process import Child

logger = logging.getLogger("awa")

SHARED = frozenset(i.name for i in (*spec.STATS_GAUGES, *spec.FLEET_GAUGES))
STATS = frozenset(i.name for i in spec.STATS_GAUGES)
WITHOUT_STATS = "?stats=0"  # what a child serves then (awa.metrics.http)
PROCESS_LABEL = "process"


def _fetch(url: str, timeout_s: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body.decode()
    except OSError as exc:  # the child is restarting or stopping: its series are absent
        logger.debug("metrics: scraping %s failed: %s", url, exc)
        return None


def merge(scrapes: Iterable[tuple[int, str]]) -> list[Metric]:
    """The families of every child's exposition, labelled by process (see the module).

    A database-wide family comes from the first child whose copy has samples: a child
    that has not read the statistics yet serves the family empty, and taken from it the
    fleet's depth, lag and pause vanished while the other children had them (a review).
    A family once taken is dropped from later children's text before parsing: with
    thousands of queues those copies are most of each child's text."""
    families: dict[str, Metric] = {}
    taken: set[str] = set()
    for index, text in scrapes:
        if taken:
            text = _without(text, taken)
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            shared = family.name in SHARED
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            if shared:
                if family.name in taken or not family.samples:
                    continue  # taken from an earlier child, or none to take here
                taken.add(family.name)
            for s in family.samples:
                labels = s.labels if shared else {PROCESS_LABEL: str(index), **s.labels}
                merged.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))
    return list(families.values())


def _family(line: str) -> str:
    """The family a line of an exposition belongs to (gauges: its sample's name)."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        return parts[2] if len(parts) > 2 else ""
    return line.split("{", 1)[0].split(" ", 1)[0]


def _without(text: str, names: Set[str]) -> str:
    """``text`` without the samples and comments of the families ``names``."""
    return "".join(line for line in text.splitlines(keepends=True) if _family(line) not in names)


def _stats_of(text: str) -> str | None:
    """Only the depth, lag and pause families of ``text``, if it has samples of them."""
    lines = [line for line in text.splitlines(keepends=True) if _family(line) in STATS]
    return "".join(lines) if any(not line.startswith("#") for line in lines) else None


def supervisor_families(children: Sequence[Child], answered: set[int]) -> list[Metric]:
    """The supervisor's own metrics: which children are up, how often each restarted."""
    up = GaugeMetricFamily(
        "awa_supervisor_process_up",
        "1 while the worker process runs and answered this scrape.",
        labels=[PROCESS_LABEL],
    )
    restarts = CounterMetricFamily(
        "awa_supervisor_restarts",
        "Times the supervisor restarted the worker process after it died.",
        labels=[PROCESS_LABEL],
    )
    for child in children:
        up.add_metric([str(child.index)], 1.0 if child.index in answered else 0.0)
        restarts.add_metric([str(child.index)], float(child.restarts))
    return [up, restarts]


SCRAPE_TIMEOUT_S = STATS_TIMEOUT_S + 2.0
"""How long the supervisor waits for each child: past the child's own waits — for fresh
statistics, then for its worker's snapshot (a second) when its event loop is blocked —
so such a child answers with its last values in time. With no margin such an answer
came just too late: every child of a slow database read as down, and one with a
blocked loop flapped between up and down (a review)."""


class FleetMetrics:
    """What a supervisor serves on ``--metrics-port``: its children's metrics, merged."""

    def __init__(
        self, children: Callable[[], Sequence[Child]], *, timeout_s: float = SCRAPE_TIMEOUT_S
    ):
        self._children = children
        self.timeout_s = timeout_s
        self._stats_from: int | None = None  # the child asked for depth, lag and pause

    def render(self, *, stats: bool = True) -> bytes:
        """Scrape every running child now and return the merged exposition."""
        children = list(self._children())
        targets = [(c.index, c.metrics_url) for c in children if c.ready and c.metrics_url]
        scrapes: list[tuple[int, str]] = []
        if targets:
            indexes = [index for index, _ in targets]
            if self._stats_from not in indexes:
                self._stats_from = indexes[0]
            asked = [(i, url if i == self._stats_from else url + WITHOUT_STATS)
                     for i, url in targets]  # fmt: skip
            with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
                texts = pool.map(lambda t: _fetch(t[1], self.timeout_s), asked)
                scrapes = [(index, text) for (index, _), text in zip(targets, texts, strict=True)
                           if text is not None]  # fmt: skip
            answered = dict(scrapes)
            first = answered.get(self._stats_from)
            if first is None or _stats_of(first) is None:
                scrapes = self._stats_elsewhere(targets) + scrapes
        families = merge(scrapes) + supervisor_families(children, {i for i, _ in scrapes})

        class Collected:
            def collect(self) -> list[Metric]:
                return families

        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collected())
        return generate_latest(registry)

    def _stats_elsewhere(self, targets: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """The depth, lag and pause of the next child that has them, which is asked for
        them from now on; none when no child has them yet."""
        for index, url in targets:
            if index == self._stats_from:
                continue
            text = _fetch(url, self.timeout_s)
            found = _stats_of(text) if text is not None else None
            if found is not None:
                self._stats_from = index
                return [(index, found)]
        return []
