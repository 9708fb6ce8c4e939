"""Plot W1 throughput and W2 latency per system from a results.json (runs in the bench-only
tools venv, which has matplotlib; awa never depends on it).

    python bench/plot.py bench/results/results.json bench/results/results.png
"""

from __future__ import annotations

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(source: str, target: str) -> None:
    with open(source) as raw:
        results = json.load(raw)
    runs = results["runs"]
    systems = [s for s in results["meta"]["systems"] if s not in results["meta"]["skipped"]]

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
    meta = results["meta"]
    version, cpus = meta["server"]["server_version"], meta["machine"]["nproc"]
    fig.suptitle(f"{meta['started']}, PostgreSQL {version}, {cpus} CPUs")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
