"""Draw bench/fairness.py's results (run in the bench-only venv that has matplotlib).

bench/.venvs/plot/bin/python bench/fairness_plot.py results.json docs/fairness.png
"""

from __future__ import annotations

import json
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"critical": "tab:red", "default": "tab:blue", "bulk": "tab:green", "late": "tab:purple"}


SMOOTH = 5  # the timeline shows a rolling mean of 5 samples (100 ms)


def _rolling(values: list[float]) -> list[float]:
    return [
        sum(values[max(0, i - SMOOTH + 1) : i + 1]) / len(values[max(0, i - SMOOTH + 1) : i + 1])
        for i in range(len(values))
    ]


def _series(samples: list[Any], queue: str) -> tuple[list[float], list[float]]:
    return [t for t, _ in samples], _rolling([s.get(queue, 0) for _, s in samples])


def _timeline(ax: Any, results: dict[str, Any]) -> None:
    run = results["runs"]["wake_on"]
    samples = run["samples"]
    for queue, color in COLORS.items():
        ax.plot(*_series(samples, queue), color=color, lw=1, label=queue)
    ax.plot(
        [t for t, _ in samples],
        _rolling([sum(s.values()) for _, s in samples]),
        color="black",
        lw=0.8,
        ls=":",
        label="total",
    )
    for e in run["events"]:
        ax.axvspan(e["inserted"], e["left"], color="tab:purple", alpha=0.06)
    for row in results["fairness"]:
        if row["queue"] in COLORS:
            ax.hlines(
                row["ideal"], row["start"], row["end"], colors=COLORS[row["queue"]], ls="--", lw=0.8
            )
    ax.set_title(
        f"weighted mode, global_max_workers={results['global']}: in-flight per queue "
        "(health_check every 20 ms, 100 ms rolling mean; dashed = ideal; shaded = 'late' has work)",
        fontsize=9,
    )
    ax.set_xlabel("seconds")
    ax.set_ylabel("in flight")
    ax.legend(fontsize=7, ncol=5, loc="upper right")


def _convergence(ax: Any, results: dict[str, Any]) -> None:
    for label, color in (("wake_on", "tab:purple"), ("wake_off", "tab:gray")):
        run = results["runs"][label]
        for i, e in enumerate(run["events"]):
            xs, ys = [], []
            for t, s in run["samples"]:
                if e["inserted"] - 0.05 <= t <= e["inserted"] + 0.6:
                    xs.append(1000 * (t - e["inserted"]))
                    ys.append(s.get("late", 0))
            name = "with the beyond wake" if label == "wake_on" else "record (self-wake only)"
            ax.step(
                xs, ys, where="post", color=color, lw=0.8, alpha=0.7, label=name if i == 0 else None
            )
    ax.axhline(results["target"], color="black", ls="--", lw=0.7, label="share")
    ax.set_title("'late' joining: in flight after its insert, every join", fontsize=9)
    ax.set_xlabel("ms after insert")
    ax.set_ylabel("'late' in flight")
    ax.legend(fontsize=7)


def _throughput(ax: Any, results: dict[str, Any]) -> None:
    for label, color in (("weighted", "tab:purple"), ("hard_reserved", "tab:gray")):
        run = results["throughput"][label]
        samples = run["samples"]
        ax.plot(
            [t for t, _ in samples],
            [sum(s.values()) for _, s in samples],
            color=color,
            lw=1,
            label=f"{label}: {run['jobs_per_s']:.0f} jobs/s, done in {run['makespan_s']:.1f} s",
        )
    ax.set_title("the same fixed work: total in flight", fontsize=9)
    ax.set_xlabel("seconds")
    ax.set_ylabel("in flight")
    ax.legend(fontsize=7)


def main() -> None:
    with open(sys.argv[1]) as f:
        results = json.load(f)
    fig = plt.figure(figsize=(11, 8))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.2, 1])
    _timeline(fig.add_subplot(grid[0, :]), results)
    _convergence(fig.add_subplot(grid[1, 0]), results)
    _throughput(fig.add_subplot(grid[1, 1]), results)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
