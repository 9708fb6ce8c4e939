"""Plot a results.json (runs in the bench-only tools venv, which has matplotlib; awa never
depends on it): W1 throughput and W2 latency per system, and, when the run has W1×P, the
scale-out over worker processes.

    python bench/plot.py bench/results/results.json bench/results/results.png [scale-out.png]
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _systems(results: dict[str, Any]) -> list[str]:
    meta = results["meta"]
    return [s for s in meta["systems"] if s not in meta["skipped"]]


def _title(results: dict[str, Any]) -> str:
    meta = results["meta"]
    version, cpus = meta["server"]["server_version"], meta["machine"]["nproc"]
    return f"{meta['started']}, PostgreSQL {version}, {cpus} CPUs"


def throughput_and_latency(results: dict[str, Any], target: str) -> None:
    runs = results["runs"]
    systems = _systems(results)

    def per_system(workload: str, key: str) -> tuple[list[str], list[list[float]]]:
        names, found = [], []
        for name in systems:
            values = [
                r[key]
                for r in runs
                if r["workload"] == workload and r["system"] == name and key in r
            ]
            if values:
                names.append(name)
                found.append(values)
        return names, found

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    names, drains = per_system("W1", "drain_jobs_per_s")
    medians = [statistics.median(v) for v in drains]
    palette = {"awa": "tab:orange", "peer": "tab:blue", "reference": "tab:gray"}
    colours = [palette[results["meta"]["systems"][n]["role"]] for n in names]
    left.bar(names, medians, color=colours)
    for i, values in enumerate(drains):
        left.plot([i] * len(values), values, "k.", markersize=5)
    left.set_title(f"W1 drain: {results['meta']['settings']['jobs']} no-op jobs, 32 handlers")
    left.set_ylabel("jobs/s (median bar, dots = repetitions)")
    left.tick_params(axis="x", rotation=30)

    width, plotted = 0.2, False
    for offset, key in enumerate(("p50_ms", "p95_ms", "p99_ms")):
        names2, values = per_system("W2", key)
        plotted = plotted or bool(values)
        xs = [systems.index(n) + (offset - 1) * width for n in names2]
        right.bar(xs, [statistics.median(v) for v in values], width, label=key[:-3])
    right.set_xticks(range(len(systems)), systems, rotation=30)
    if plotted:
        right.set_yscale("log")
    right.set_ylabel("insert-commit → handler-start, ms (log)")
    right.set_title(f"W2 latency at {results['meta']['settings']['w2_rate']:.0f} jobs/s")
    right.legend()
    fig.suptitle(_title(results))
    fig.tight_layout()
    fig.savefig(target, dpi=110)


# awa is orange in every plot; the others take these in turn.
_PEER_COLOURS = ("tab:blue", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:cyan",
                 "tab:olive", "tab:pink", "tab:gray")  # fmt: skip


def _by_processes(
    results: dict[str, Any], name: str, key: str, counts: list[int], each: bool
) -> tuple[list[int], list[list[float]]]:
    """The values of ``key`` for ``name`` at each process count that has some (1 is W1)."""
    suffix = "each" if each else ""
    xs, found = [], []
    for p in counts:
        workload = "W1" if p == 1 else f"W1x{p}{suffix}"
        values = [
            r[key]
            for r in results["runs"]
            if r["workload"] == workload and r["system"] == name and r.get(key) is not None
        ]
        if values:
            xs.append(p)
            found.append(values)
    return xs, found


def scale_out(results: dict[str, Any], target: str) -> None:
    """W1×P: jobs/s with 32 handlers split over more processes and with 32 in each, and the
    server's CPU per job; nothing is written when the run has no W1×P."""
    counts = results["meta"]["settings"].get("processes", [1, 2, 4])
    if not any(r["workload"].startswith("W1x") for r in results["runs"]):
        return
    fig, (split, each, cpu) = plt.subplots(1, 3, figsize=(16, 5))
    colours = iter(_PEER_COLOURS)
    for name in _systems(results):
        if len(_by_processes(results, name, "drain_jobs_per_s", counts, False)[0]) < 2:
            continue  # no W1×P for this system (awa's variants, peers not run)
        colour = "tab:orange" if name == "awa" else next(colours, "black")
        for axis, per_process in ((split, False), (each, True)):
            xs, values = _by_processes(results, name, "drain_jobs_per_s", counts, per_process)
            if len(xs) < 2:
                continue
            axis.plot(xs, [statistics.median(v) for v in values], "o-", color=colour, label=name)
            for x, vs in zip(xs, values, strict=True):
                axis.plot([x] * len(vs), vs, ".", color="k", markersize=4)
        for per_process, style in ((False, "o-"), (True, "s--")):
            xs, values = _by_processes(results, name, "server_cpu_us_per_job", counts, per_process)
            if len(xs) < 2:
                continue
            label = f"{name}, {'32 each' if per_process else 'split'}"
            cpu.plot(xs, [statistics.median(v) for v in values], style, color=colour, label=label)
    split.set_title("32 handlers split over the processes")
    each.set_title("32 handlers in each process")
    cpu.set_title("server CPU per job (solid: split, dashed: 32 each)")
    for axis in (split, each):
        axis.set_ylabel("jobs/s (median; dots = repetitions)")
        axis.set_ylim(bottom=0)
    cpu.set_ylabel("µs per job (median)")
    cpu.set_yscale("log")
    for axis in (split, each, cpu):
        axis.set_xticks(counts)
        axis.set_xlabel("worker processes")
        axis.legend(fontsize=8)
    fig.suptitle(f"W1×P scale-out, {results['meta']['settings']['jobs']} no-op jobs; "
                 + _title(results))  # fmt: skip
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main(source: str, target: str, scale_out_target: str | None = None) -> None:
    with open(source) as raw:
        results = json.load(raw)
    throughput_and_latency(results, target)
    if scale_out_target is not None:
        scale_out(results, scale_out_target)


if __name__ == "__main__":
    main(*sys.argv[1:4])
