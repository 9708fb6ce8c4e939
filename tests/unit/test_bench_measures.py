"""The bench harness's derived measures (W6 slot gaps, running overlap): pure functions
over recorded handler start and end times, checked on hand-made timelines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from harness.workloads import max_overlap, percentile, slot_gaps


def test_each_end_is_matched_to_the_next_unmatched_start() -> None:
    # two slots: jobs end at 1.0 and 1.5; the starts at 1.002 and 1.51 take those slots
    starts = [0.0, 0.0, 1.002, 1.51]
    ends = [1.0, 1.5, 2.0, 2.5]
    gaps = slot_gaps(starts, ends)
    assert gaps == pytest.approx([2.0, 10.0])  # ends after the last start are left out


def test_a_start_is_matched_to_one_end_only() -> None:
    # two ends before one start: only the first end finds it
    assert slot_gaps([0.0, 0.0, 3.0], [1.0, 2.0, 4.0]) == pytest.approx([2000.0])


def test_most_running_counts_an_end_before_a_start_at_the_same_instant() -> None:
    assert max_overlap([0.0, 0.0, 1.0], [1.0, 2.0, 2.0]) == 2
    assert max_overlap([0.0, 0.5, 0.6], [1.0, 1.0, 1.0]) == 3


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
