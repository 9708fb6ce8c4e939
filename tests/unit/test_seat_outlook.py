"""A producer rests from looking for seats after a run of misses (ADR 0049)."""

from __future__ import annotations

import pytest

from awa.client.seat_outlook import MAX_QUEUES, MISSES, REST_S, SeatOutlook


@pytest.fixture
def clock() -> list[float]:
    return [1000.0]


def _miss(outlook: SeatOutlook, queue: str, times: int) -> None:
    for _ in range(times):
        assert outlook.worth_looking(queue)
        outlook.looked(queue, found=False)


def test_it_keeps_looking_until_a_run_of_misses(clock: list[float]) -> None:
    outlook = SeatOutlook(lambda: clock[0])
    _miss(outlook, "q", MISSES - 1)
    assert outlook.worth_looking("q")
    outlook.looked("q", found=False)
    assert not outlook.worth_looking("q")
    assert outlook.worth_looking("other")  # per queue


def test_a_found_seat_ends_the_count(clock: list[float]) -> None:
    outlook = SeatOutlook(lambda: clock[0])
    _miss(outlook, "q", MISSES - 1)
    outlook.looked("q", found=True)
    _miss(outlook, "q", MISSES - 1)
    assert outlook.worth_looking("q")


def test_after_a_rest_one_look_decides(clock: list[float]) -> None:
    outlook = SeatOutlook(lambda: clock[0])
    _miss(outlook, "q", MISSES)
    clock[0] += REST_S / 2
    assert not outlook.worth_looking("q")
    clock[0] += REST_S
    assert outlook.worth_looking("q")
    outlook.looked("q", found=False)  # still nobody idle: rest again at once
    assert not outlook.worth_looking("q")
    clock[0] += REST_S
    outlook.looked("q", found=True)  # a worker went idle
    assert outlook.worth_looking("q")


def test_a_producer_inserting_into_ever_new_queues_remembers_a_bounded_number(
    clock: list[float],
) -> None:
    """One entry per queue ever inserted into, for good (a review of long runs)."""
    outlook = SeatOutlook(lambda: clock[0])
    for i in range(3 * MAX_QUEUES):
        _miss(outlook, f"tenant-{i}", MISSES)
    assert len(outlook._misses) <= MAX_QUEUES and len(outlook._rest_until) <= MAX_QUEUES
    assert not outlook.worth_looking(f"tenant-{3 * MAX_QUEUES - 1}")  # the latest still rest
