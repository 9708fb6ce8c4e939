"""The per-process budget of args bytes in flight (awa.worker.args_budget), alone."""

from __future__ import annotations

from awa.worker.args_budget import ArgsBudget

MIB = 1024 * 1024


def test_a_fresh_budget_assumes_the_largest_args() -> None:
    budget = ArgsBudget(64 * MIB)
    assert budget.claimable(512) == 64  # 64 MiB at 1 MiB each
    assert budget.claimable(10) == 10
    assert budget.claimable(0) == 0


def test_charges_and_gives_back_each_job_once() -> None:
    budget = ArgsBudget(10 * MIB)
    backs = [budget.hold(4 * MIB) for _ in range(3)]
    assert budget.in_flight == 12 * MIB and budget.peak == 12 * MIB
    assert budget.claimable(5) == 0  # spent: a claim must wait
    backs[0]()
    backs[0]()  # a second release changes nothing
    assert budget.in_flight == 8 * MIB
    assert budget.claimable(5) == 2  # 2 MiB of room at the 1 MiB estimate
    for back in backs:
        back()
    assert budget.in_flight == 0 and budget.peak == 12 * MIB


def test_a_job_bigger_than_the_budget_still_runs_alone() -> None:
    budget = ArgsBudget(MIB // 2)
    assert budget.claimable(100) == 1
    back = budget.hold(MIB)
    assert budget.claimable(100) == 0
    back()
    assert budget.claimable(100) == 1


def test_the_estimate_falls_by_halves_and_rises_at_once() -> None:
    budget = ArgsBudget(64 * MIB)
    budget.observe([100] * 64)  # small jobs after all
    assert budget.estimate == MIB // 2
    for _ in range(12):
        budget.observe([100] * 512)
    assert budget.estimate == 128  # halved 13 times from 1 MiB
    budget.observe([100])
    assert budget.estimate == 100  # down to the mean of what claims return
    assert budget.claimable(512) == 512
    budget.observe([MIB, MIB, 100, 100])  # big jobs again
    assert budget.estimate == (2 * MIB + 200) // 4
    assert budget.claimable(512) == 127
    budget.observe([])
    assert budget.estimate == (2 * MIB + 200) // 4  # an empty claim says nothing


def test_a_partly_spent_budget_claims_only_what_fits() -> None:
    """Room for less than one job at the estimate: no claim (it would overshoot)."""
    budget = ArgsBudget(MIB)
    for _ in range(2):  # 1 MiB → 512 KiB → 256 KiB: the estimate reaches the jobs' size
        budget.observe([256 * 1024 - 100] * 4)
    backs = [budget.hold(256 * 1024 - 100) for _ in range(4)]
    assert budget.claimable(10) == 0  # 400 bytes of room: not one more job
    backs[0]()
    assert budget.claimable(10) == 1


def test_dispatchers_are_woken_when_a_refused_claim_would_now_fit() -> None:
    budget = ArgsBudget(2 * MIB)
    woken: list[str] = []
    budget.subscribe(lambda: woken.append("a"))
    budget.subscribe(lambda: woken.append("b"))
    first, second = budget.hold(MIB), budget.hold(MIB)
    first()
    assert woken == []  # nobody was refused: nobody to wake
    first = budget.hold(MIB)
    assert budget.claimable(3) == 0  # refused: spent
    first()
    assert woken == ["a", "b"]  # now one fits: every dispatcher may try
    second()
    assert woken == ["a", "b"]  # woken once per refusal
