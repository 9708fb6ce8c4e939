"""Tables of the second release's workloads: cost per job, W1×P, W5, W6, idle."""

from __future__ import annotations

import statistics
from typing import Any

from harness.report import Summary, _table, fmt, values


def _median(found: list[float]) -> float | None:
    return statistics.median(found) if found else None


def _cell(found: list[float]) -> str:
    return fmt(_median(found))


def cost_table(summary: Summary) -> list[str]:
    """What one job cost each system in W1 (drain) and in the bulk enqueue before it."""
    keys = [
        ("client_cpu_us_per_job", "worker CPU µs"),
        ("server_cpu_us_per_job", "server CPU µs"),
        ("wal_bytes_per_job", "WAL bytes"),
        ("xacts_per_job", "transactions"),
        ("enqueue_client_cpu_us_per_job", "bulk: client CPU µs"),
        ("enqueue_server_cpu_us_per_job", "bulk: server CPU µs"),
        ("enqueue_wal_bytes_per_job", "bulk: WAL bytes"),
    ]
    rows = []
    for name in summary.systems:
        cells = [_cell(values(summary.runs, "W1", name, key)) for key, _ in keys]
        if any(c != "–" for c in cells):
            rows.append([name, *cells])
    if not rows:
        return ["(not run)"]
    return _table(["system (W1, per job)", *[label for _, label in keys]], rows)


def insert_cost_table(summary: Summary) -> list[str]:
    """What one single insert (W3) cost, next to the pgbench one-client ceiling."""
    ceiling = _median(values(summary.runs, "ceiling", "pgbench", "tps_1"))
    keys = ["client_cpu_us_per_job", "server_cpu_us_per_job", "wal_bytes_per_job"]
    rows = []
    for name in summary.systems:
        rate = values(summary.runs, "W3", name, "inserts_per_s")
        if not rate:
            continue
        share = f"{_median(rate) / ceiling:.2f}" if ceiling else "–"  # type: ignore[operator]
        rows.append(
            [name, _cell(rate), share, *[_cell(values(summary.runs, "W3", name, k)) for k in keys]]
        )
    if not rows:
        return ["(not run)"]
    header = [
        "system (W3)",
        "inserts/s",
        "÷ pgbench 1 client",
        "client CPU µs/insert",
        "server CPU µs/insert",
        "WAL bytes/insert",
    ]
    return _table(header, rows)


def scale_out_table(summary: Summary, counts: list[int], *, each: bool = False) -> list[str]:
    """W1×P: jobs/s with the 32 handlers split over more processes, or (``each``) with 32
    handlers in every process; 1 process is W1 itself."""
    suffix = "each" if each else ""
    rows = []
    for name in summary.systems:
        base = _median(values(summary.runs, "W1", name, "drain_jobs_per_s"))
        cells: list[str] = []
        for p in counts:
            workload = "W1" if p == 1 else f"W1x{p}{suffix}"
            rate = _median(values(summary.runs, workload, name, "drain_jobs_per_s"))
            cpu = _median(values(summary.runs, workload, name, "server_cpu_us_per_job"))
            ratio = f"×{rate / base:.2f}" if rate and base else "–"
            cells += [fmt(rate), ratio, fmt(cpu)] if p > 1 else [fmt(rate), fmt(cpu)]
        if any(
            values(summary.runs, f"W1x{p}{suffix}", name, "drain_jobs_per_s") for p in counts[1:]
        ):
            rows.append([name, *cells])
    if not rows:
        return ["(not run)"]
    header = ["system"]
    for p in counts:
        ratio = ["÷ 1 proc"] if p > 1 else []
        header += [f"{p} proc jobs/s", *ratio, "server CPU µs/job"]
    return _table(header, rows)


def cpu_bound_table(summary: Summary, counts: list[int]) -> list[str]:
    """W5: CPU-bound jobs over 1 and 2 processes."""
    rows = []
    for name in summary.systems:
        rates = [_median(values(summary.runs, f"W5x{p}", name, "drain_jobs_per_s")) for p in counts]
        if not any(rates):
            continue
        ratio = f"×{rates[-1] / rates[0]:.2f}" if rates[0] and rates[-1] else "–"
        rows.append([name, *[fmt(r) for r in rates], ratio])
    if not rows:
        return ["(not run)"]
    header = ["system", *[f"{p} proc jobs/s" for p in counts], f"{counts[-1]} ÷ {counts[0]}"]
    return _table(header, rows)


def fleet_cap_table(summary: Summary) -> list[str]:
    """W6: a fleet-wide cap of 20 over 3 processes vs 20 local permits split 7/7/6."""
    runs = [r for r in summary.runs if r["workload"] == "W6"]
    skipped = [r["skipped"] for r in runs if "skipped" in r]
    if not runs:
        return ["(not run)"]
    if skipped and not any("jobs_per_s" in r for r in runs):
        return [f"Skipped: {skipped[0]}."]
    rows = []
    for mode in ("capped", "uncapped"):
        mine = [r for r in runs if r["system"].endswith(f" {mode}") and "jobs_per_s" in r]
        if not mine:
            why = next((r["skipped"] for r in runs if r["system"].endswith(f" {mode}")), "–")
            rows.append([mode, why, "", "", ""])
            continue
        rows.append(
            [
                mode,
                _cell([r["jobs_per_s"] for r in mine]),
                _cell([r["slot_gap_p50_ms"] for r in mine if "slot_gap_p50_ms" in r]),
                _cell([r["slot_gap_p99_ms"] for r in mine if "slot_gap_p99_ms" in r]),
                str(max((r["max_running"] for r in mine), default="–")),
            ]
        )
    ratio = w6_ratio(summary.runs)
    rows.append(["capped ÷ uncapped", "–" if ratio is None else f"{ratio:.3f}", "", "", ""])
    header = ["mode", "jobs/s", "slot freed → next start p50 ms", "p99 ms", "most running"]
    return _table(header, rows)


def w6_ratio(runs: list[dict[str, Any]]) -> float | None:
    """Median over repetitions of capped ÷ uncapped jobs/s."""
    by_rep: dict[int, dict[str, float]] = {}
    for r in runs:
        if r["workload"] == "W6" and "jobs_per_s" in r:
            mode = "capped" if r["system"].endswith(" capped") else "uncapped"
            by_rep.setdefault(r["rep"], {})[mode] = r["jobs_per_s"]
    ratios = [d["capped"] / d["uncapped"] for d in by_rep.values() if len(d) == 2]
    return _median(ratios)


def idle_table(summary: Summary) -> list[str]:
    """Idle: what workers with nothing to do cost the server."""
    runs = [r for r in summary.runs if r["workload"].startswith("idle ")]
    if not runs:
        return ["(not run)"]
    cells: dict[tuple[int, int], list[dict[str, Any]]] = {}
    notes: dict[tuple[int, int], str] = {}
    for r in runs:
        q, p = _idle_shape(r["workload"])
        if "skipped" in r:
            notes[(q, p)] = r["skipped"]
        elif "statements_per_s" in r:
            cells.setdefault((q, p), []).append(r)
    rows = []
    for q, p in sorted(set(cells) | set(notes)):
        found = cells.get((q, p), [])
        if not found:
            rows.append([str(q), str(p), notes[(q, p)], "", ""])
            continue
        rows.append(
            [
                str(q),
                str(p),
                _cell([r["statements_per_s"] for r in found]),
                _cell([r["server_cpu_percent"] for r in found if "server_cpu_percent" in r]),
                _cell([r["client_cpu_percent"] for r in found]),
            ]
        )
    header = ["queues", "processes", "statements/s ↓", "server CPU % of a core", "workers CPU %"]
    return _table(header, rows)


def _idle_shape(workload: str) -> tuple[int, int]:
    """``idle 100q x10`` → (100, 10)."""
    _, queues, processes = workload.split()
    return int(queues[:-1]), int(processes[1:])


def idle_cost(summary: Summary, queues: int) -> dict[str, float] | None:
    """Median statements/s and server CPU % of one idle process on ``queues`` queues."""
    found = [
        r for r in summary.runs if r["workload"] == f"idle {queues}q x1" and "statements_per_s" in r
    ]
    if not found:
        return None
    return {
        "statements_per_s": statistics.median(r["statements_per_s"] for r in found),
        "server_cpu_percent": statistics.median(r.get("server_cpu_percent", 0) for r in found),
    }
