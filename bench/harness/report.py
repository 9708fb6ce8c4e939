"""Medians, ranges and ratios from the raw results; the markdown tables and docs page."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    workload: str
    key: str
    label: str
    higher_is_better: bool


W1 = [
    Metric("W1", "drain_jobs_per_s", "W1 drain jobs/s", True),
    Metric("W1", "enqueue_jobs_per_s", "bulk enqueue jobs/s", True),
    Metric("W1", "peak_rss_mb", "worker peak RSS MB", False),
]
W2 = [Metric("W2", f"{p}_ms", f"W2 {p} ms", False) for p in ("p50", "p95", "p99", "max")]
W3 = [Metric("W3", "inserts_per_s", "W3 inserts/s", True)]


def fmt(value: float | None) -> str:
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def values(runs: Iterable[dict[str, Any]], workload: str, system: str, key: str) -> list[float]:
    # A metric a repetition could not take (None) is left out, not a hole in the median.
    return [
        r[key]
        for r in runs
        if r["workload"] == workload and r["system"] == system and r.get(key) is not None
    ]


class Summary:
    """Per (workload, system, metric): the values of every repetition."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results = results
        self.runs = results["runs"]
        peers = results["meta"]["systems"]
        self.systems = [name for name in peers if name not in results["meta"]["skipped"]]
        self.peers = [name for name in self.systems if peers[name]["role"] == "peer"]

    def median(self, m: Metric, system: str) -> float | None:
        found = values(self.runs, m.workload, system, m.key)
        return statistics.median(found) if found else None

    def best_peer(self, m: Metric) -> float | None:
        medians = [v for p in self.peers if (v := self.median(m, p)) is not None]
        if not medians:
            return None
        return max(medians) if m.higher_is_better else min(medians)

    def ratio(self, m: Metric, system: str) -> float | None:
        value, best = self.median(m, system), self.best_peer(m)
        if value is None or not best:
            return None
        return value / best

    def cells(self, m: Metric, system: str) -> list[str]:
        found = values(self.runs, m.workload, system, m.key)
        if not found:
            mine = [r for r in self.runs if r["workload"] == m.workload and r["system"] == system]
            errors = [r for r in mine if "error" in r]
            return ["failed" if errors else "–", "", ""]
        ratio = self.ratio(m, system)
        spread = f"{fmt(min(found))}–{fmt(max(found))}"
        return [fmt(statistics.median(found)), spread, f"×{ratio:.2f}" if ratio else ""]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _metric_table(summary: Summary, metrics: list[Metric]) -> list[str]:
    header = ["system"]
    for m in metrics:
        arrow = "↑" if m.higher_is_better else "↓"
        header += [f"{m.label} {arrow}", "min–max", "÷ best peer"]
    rows = [
        [name, *[c for m in metrics for c in summary.cells(m, name)]] for name in summary.systems
    ]
    return _table(header, rows)


def _w2_table(summary: Summary) -> list[str]:
    header = [
        "system",
        "p50 ms ↓",
        "p95 ms ↓",
        "p99 ms ↓",
        "p99 min–max",
        "p99 ÷ best peer",
        "max ms ↓",
        "missing / inserted",
        "producer jobs/s",
    ]
    rows = []
    for name in summary.systems:
        runs = [r for r in summary.runs if r["workload"] == "W2" and r["system"] == name]
        ok = [r for r in runs if "p50_ms" in r]
        if not ok:
            rows.append([name, "failed" if runs else "–", *[""] * 7])
            continue
        p = {m.key: summary.cells(m, name) for m in W2}
        missing = f"{sum(r['missing'] for r in ok)} / {sum(r['inserted'] for r in ok)}"
        rate = fmt(statistics.median(r["producer_rate"] for r in ok))
        rows.append(
            [
                name,
                p["p50_ms"][0],
                p["p95_ms"][0],
                p["p99_ms"][0],
                p["p99_ms"][1],
                p["p99_ms"][2],
                p["max_ms"][0],
                missing,
                rate,
            ]
        )
    return _table(header, rows)


def w4_ratios(runs: list[dict[str, Any]]) -> list[float]:
    """Weighted ÷ hard-reserved per repetition (the two modes run back to back)."""
    by_rep: dict[int, dict[str, float]] = {}
    for r in runs:
        if r["workload"] == "W4" and "drain_jobs_per_s" in r:
            by_rep.setdefault(r["rep"], {})[r["system"]] = r["drain_jobs_per_s"]
    return [d["awa weighted"] / d["awa hard"] for d in by_rep.values() if len(d) == 2]


def _w4_table(summary: Summary) -> list[str]:
    runs = [r for r in summary.runs if r["workload"] == "W4" and "drain_jobs_per_s" in r]
    if not runs:
        return ["(not run)"]
    rows = []
    for mode in ("hard", "weighted"):
        found = [r["drain_jobs_per_s"] for r in runs if r["system"] == f"awa {mode}"]
        if found:
            spread = f"{fmt(min(found))}–{fmt(max(found))}"
            rows.append([f"awa, {mode}", fmt(statistics.median(found)), spread])
    ratios = w4_ratios(summary.runs)
    if ratios:
        spread = f"{min(ratios):.3f}–{max(ratios):.3f}"
        rows.append(["weighted ÷ hard-reserved", f"{statistics.median(ratios):.3f}", spread])
    return _table(["mode (4 queues)", "jobs/s ↑", "min–max"], rows)


def _ceiling_table(summary: Summary) -> list[str]:
    runs = [r for r in summary.runs if r["workload"] == "ceiling" and "error" not in r]
    if not runs:
        return ["(not run)"]
    rows = []
    for key in sorted(
        {k for r in runs for k in r if k.startswith("tps_")}, key=lambda k: int(k[4:])
    ):
        found = [r[key] for r in runs if key in r]
        rows.append(
            [key[4:], fmt(statistics.median(found)), f"{fmt(min(found))}–{fmt(max(found))}"]
        )
    return _table(["pgbench clients", "TPS", "min–max"], rows)


def _check(label: str, ok: bool, shown: str) -> str:
    return f"{label}: {'met' if ok else 'NOT met'} ({shown})"


def _bar(summary: Summary) -> list[str]:
    """The bar of BENCHMARKS.md (second release), checked for every awa variant."""
    from harness import report_more as more

    lines = []
    seed_bulk = summary.median(W1[1], "awa-pg")
    ceiling = summary.median(Metric("ceiling", "tps_1", "", True), "pgbench")
    for name in summary.systems:
        if summary.results["meta"]["systems"][name]["role"] != "awa":
            continue
        checks = []
        drain, w3 = summary.ratio(W1[0], name), summary.ratio(W3[0], name)
        target = 2.5 if name == "awa (durable)" else 3.0
        if drain is not None:
            checks.append(
                _check(f"W1 drain ≥ {target}× best peer", drain >= target, f"×{drain:.2f}")
            )
        p99, best_p99 = summary.median(W2[2], name), summary.best_peer(W2[2])
        if p99 is not None and best_p99:
            ok = p99 <= 0.5 * best_p99 and p99 <= 10
            shown = f"{fmt(p99)} ms vs {fmt(best_p99)} ms, ×{p99 / best_p99:.2f}"
            checks.append(_check("W2 p99 ≤ 0.5× best peer and ≤ 10 ms", ok, shown))
        bulk = summary.median(W1[1], name)
        if bulk is not None and seed_bulk:
            ratio = bulk / seed_bulk
            checks.append(_check("bulk ≥ 1.5× awa-pg's COPY", ratio >= 1.5, f"×{ratio:.2f}"))
        if w3 is not None:
            checks.append(_check("W3 ≥ 1.2× best peer", w3 >= 1.2, f"×{w3:.2f}"))
        inserts = summary.median(W3[0], name)
        if inserts is not None and ceiling:
            share = inserts / ceiling
            checks.append(_check("W3 ≥ 0.7× pgbench 1 client", share >= 0.7, f"{share:.2f}"))
        rss = summary.median(W1[2], name)
        if rss is not None:
            checks.append(_check("W1 worker peak RSS ≤ 100 MB", rss <= 100, f"{fmt(rss)} MB"))
        if name == "awa":
            checks += _bar_awa_only(summary, more)
        lines.append(f"**{name}**: " + "; ".join(checks))
        lines.append("")
    return lines


def _bar_awa_only(summary: Summary, more: Any) -> list[str]:
    checks = []
    ratios = w4_ratios(summary.runs)
    if ratios:
        ratio = statistics.median(ratios)
        label = "W4 weighted within 5 % of hard-reserved (median of per-rep ratios)"
        checks.append(_check(label, ratio >= 0.95, f"{ratio:.3f}"))
    base = summary.median(W1[0], "awa")
    scaled = [
        (p, summary.median(Metric(f"W1x{p}", "drain_jobs_per_s", "", True), "awa")) for p in (2, 4)
    ]
    shown = [f"{p}: ×{v / base:.2f}" for p, v in scaled if v is not None and base]
    if shown:
        ok = all(v is not None and base and v >= 0.9 * base for _, v in scaled)
        checks.append(_check("W1×P ≥ 0.9× one process", ok, ", ".join(shown)))
    each = summary.median(Metric("W1x4each", "drain_jobs_per_s", "", True), "awa")
    if each is not None and base:
        label = "W1×P with 32 handlers in each of 4 processes ≥ 1.2× one process"
        checks.append(_check(label, each >= 1.2 * base, f"×{each / base:.2f}"))
    w5 = [summary.median(Metric(f"W5x{p}", "drain_jobs_per_s", "", True), "awa") for p in (1, 2)]
    if w5[0] and w5[1]:
        checks.append(
            _check("W5 2 ÷ 1 process ≥ 1.7", w5[1] / w5[0] >= 1.7, f"×{w5[1] / w5[0]:.2f}")
        )
    w6 = more.w6_ratio(summary.runs)
    if w6 is not None:
        checks.append(_check("W6 cap costs ≤ 10 %", w6 >= 0.9, f"{w6:.3f}"))
    idle = more.idle_cost(summary, 1000)
    if idle is not None:
        ok = idle["statements_per_s"] <= 50 and idle["server_cpu_percent"] <= 10
        shown = f"{fmt(idle['statements_per_s'])}/s, {fmt(idle['server_cpu_percent'])} % server CPU"
        checks.append(_check("idle 1 000 queues ≤ 50 statements/s and ≤ 10 % CPU", ok, shown))
    return checks


def _more_tables(summary: Summary, results: dict[str, Any]) -> list[str]:
    from harness import report_more as more

    settings = results["meta"]["settings"]
    counts = list(settings.get("processes", [1, 2, 4]))
    w5_counts = list(settings.get("w5_processes", [1, 2]))
    durable = summary.median(W1[0], "awa (durable)")
    default = summary.median(W1[0], "awa")
    cost = (
        [f"Durability: `awa (durable)` ÷ `awa` on W1 = {durable / default:.2f}.", ""]
        if durable and default
        else []
    )
    return [
        "### What one job cost (W1 drain and the bulk enqueue before it)",
        "",
        "CPU from /proc (the worker processes; the whole server, background processes "
        "included), WAL from `pg_current_wal_insert_lsn()`, transactions from "
        "`pg_stat_database`, each divided by the jobs.",
        "",
        *more.cost_table(summary),
        "",
        *cost,
        "### What one single insert cost (W3)",
        "",
        *more.insert_cost_table(summary),
        "",
        "### W1×P scale-out (32 handlers split evenly over 1, 2, 4 worker processes)",
        "",
        *more.scale_out_table(summary, counts),
        "",
        "### W1×P scale-out, 32 handlers in each of 1, 2, 4 worker processes",
        "",
        *more.scale_out_table(summary, counts, each=True),
        "",
        f"### W5 CPU-bound ({settings.get('w5_jobs', '?')} jobs of ≈ "
        f"{settings.get('w5_work_ms', '?')} ms pure-Python work; "
        f"{settings.get('w5_rounds', '?')} rounds each)",
        "",
        *more.cpu_bound_table(summary, w5_counts),
        "",
        f"### W6 fleet cap ({settings.get('w6_processes', 3)} processes, "
        f"{settings.get('w6_jobs', '?')} jobs of {settings.get('w6_sleep_ms', 10):.0f} ms)",
        "",
        *more.fleet_cap_table(summary),
        "",
        f"### Idle ({settings.get('idle_seconds', '?')} s windows)",
        "",
        *more.idle_table(summary),
        "",
    ]


def tables(results: dict[str, Any]) -> str:
    """All result tables as markdown (used by results.md and docs/benchmarks.md)."""
    summary = Summary(results)
    reps = results["meta"]["settings"]["reps"]
    jobs = results["meta"]["settings"]["jobs"]
    out = [
        f"Medians of {reps} repetition(s), min–max across them; `÷ best peer` divides by the "
        "best median among the peers (awa, its variants and reference rows excluded), so "
        "above 1 is better for ↑ metrics and below 1 is better for ↓ metrics.",
        "",
        f"### W1 drain ({jobs} no-op jobs, one worker process, 32 concurrent handlers; "
        "`awa (durable)` is W1-durable)",
        "",
        *_metric_table(summary, W1),
        "",
        f"### W2 latency (insert-commit → handler-start, single inserts at "
        f"{fmt(results['meta']['settings']['w2_rate'])}/s for "
        f"{fmt(results['meta']['settings']['w2_seconds'])} s)",
        "",
        *_w2_table(summary),
        "",
        f"### W3 insert (one producer, single-insert API, "
        f"{fmt(results['meta']['settings']['w3_seconds'])} s)",
        "",
        *_metric_table(summary, W3),
        "",
        "### W4 weighted (awa only: W1 over 4 queues)",
        "",
        *_w4_table(summary),
        "",
        "### Ceiling (pgbench, one-row `UPDATE … RETURNING` per transaction)",
        "",
        *_ceiling_table(summary),
        "",
        *_more_tables(summary, results),
        "### The bar (BENCHMARKS.md)",
        "",
        *_bar(summary),
    ]
    return "\n".join(out)


def skipped_and_failed(results: dict[str, Any]) -> list[str]:
    lines = [f"- **{name}** skipped: {why}" for name, why in results["meta"]["skipped"].items()]
    lines += [
        f"- {r['workload']} {r['system']} rep {r['rep']} failed: {r['error']}"
        for r in results["runs"]
        if "error" in r
    ]
    return lines
