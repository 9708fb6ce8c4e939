"""docs/benchmarks.md as bench/run.py writes it: the generated part, the scale-out plot
when the run has one, and the hand-written part kept below the marker."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from harness.docs import KEEP_MARKER, write_docs

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads((ROOT / "bench" / "results" / "results.json").read_text())
SCALE_OUT_LINE = "![W1×P: jobs/s and server CPU per job over 1, 2 and 4 worker processes]"


def test_the_scale_out_plot_is_shown_when_the_run_has_one(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"old generated part\n{KEEP_MARKER}\nsession notes by hand\n")
    write_docs(RESULTS, docs, "../bench/results/results.png", None, scale_out="scale-out.png")
    text = docs.read_text()
    assert f"{SCALE_OUT_LINE}(scale-out.png)" in text
    assert "old generated part" not in text
    assert text.rstrip().endswith("session notes by hand")


def test_no_scale_out_plot_no_line(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    write_docs(RESULTS, docs, "../bench/results/results.png", None)
    assert SCALE_OUT_LINE not in docs.read_text()
