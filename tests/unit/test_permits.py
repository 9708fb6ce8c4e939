"""Permits without a database: the overflow pool's fair share, demand and wake-ups, and
the per-queue permits built on it (design record 011, CONTRACT §4)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import awa
from awa.worker.permits import Grant, OverflowPool, QueuePermits, build_permits


class Wakes:
    """Records which queues were woken, in order."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def of(self, queue: str) -> Callable[[], None]:
        return lambda: self.log.append(queue)

    def take(self) -> list[str]:
        log, self.log = self.log, []
        return log


class Clock:
    """A clock the test moves: the pool's credit counts permit-seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pool(total: int, clock: Clock | None = None, **weights: int) -> tuple[OverflowPool, Wakes]:
    pool = OverflowPool(total, weights, clock=clock or Clock())
    wakes = Wakes()
    for queue in weights:
        pool.subscribe(queue, wakes.of(queue))
    return pool, wakes


# -- fair share math -------------------------------------------------------------------


def test_fair_share_is_ceil_of_weighted_split_among_contenders() -> None:
    pool, _ = _pool(10, a=3, b=1, c=1)
    assert pool.contending_weight() == 0 and pool.fair_share("a") == 10
    pool.try_acquire("a", 1)
    pool.try_acquire("b", 1)
    assert pool.contending_weight() == 4
    assert pool.fair_share("a") == 8  # ceil(10 * 3 / 4) = ceil(7.5)
    assert pool.fair_share("b") == 3  # ceil(2.5)
    pool.try_acquire("c", 1)
    assert pool.contending_weight() == 5
    assert (pool.fair_share("a"), pool.fair_share("b"), pool.fair_share("c")) == (6, 2, 2)


def test_grant_is_min_of_wanted_available_and_room_below_share() -> None:
    pool, _ = _pool(12, a=1, b=1)
    pool.try_acquire("b", 1)  # b contends: a's share is 6
    assert pool.try_acquire("a", 4) == 4  # wanted
    assert pool.try_acquire("a", 100) == 2  # share 6 - held 4
    assert pool.try_acquire("a", 100) == 0  # at its share
    assert pool.try_acquire("b", 100) == 5  # share 6 - held 1, available 6 → 5
    assert pool.available == 0 and pool.held("a") == 6 and pool.held("b") == 6


def test_holdings_without_demand_are_taken_out_of_the_division() -> None:
    pool, _ = _pool(10, a=1, b=1)
    assert pool.try_acquire("a", 3) == 3
    pool.clear_demand("a")  # a's claim could not use more: it asks for nothing now
    assert pool.demand("a") == 0 and pool.contending("a")
    assert pool.grantable("b") == 7  # not ceil(10 / 2) − 0 = 5: a's weight does not count
    assert pool.try_acquire("b", 10) == 7
    pool.release("a", 3)
    assert not pool.contending("a") and pool.grantable("b") == 3


def test_a_queue_asking_again_gets_its_weighted_share_back() -> None:
    pool, wakes = _pool(10, a=1, b=1)
    assert pool.try_acquire("a", 1) == 1
    pool.clear_demand("a")  # a trickle: one job running, nothing more
    assert pool.try_acquire("b", 10) == 9
    assert pool.try_acquire("a", 10) == 0  # a has work again: shares are 5 / 5 now
    assert pool.fair_share("a") == pool.fair_share("b") == 5
    wakes.take()
    pool.release("b", 1)
    assert wakes.take() == ["a", "b"]  # a is below its share, b above
    assert pool.try_acquire("a", 10) == 1


def test_zero_total_grants_nothing() -> None:
    pool, _ = _pool(0, a=1)
    assert pool.try_acquire("a", 5) == 0
    assert pool.fair_share("a") == 0 and pool.available == 0


def test_constructor_rejects_negative_total_and_zero_weight() -> None:
    with pytest.raises(ValueError, match="total"):
        OverflowPool(-1, {"a": 1})
    with pytest.raises(ValueError, match="weight"):
        OverflowPool(1, {"a": 0})


# -- demand ------------------------------------------------------------------------------


def test_demand_is_the_last_request_and_clear_demand_resets_it() -> None:
    pool, _ = _pool(4, a=1, b=1)
    pool.try_acquire("a", 7)
    assert pool.demand("a") == 7
    pool.try_acquire("a", 2)
    assert pool.demand("a") == 2
    pool.clear_demand("a")
    assert pool.demand("a") == 0
    pool.try_acquire("a", -3)
    assert pool.demand("a") == 0


def test_unmet_demand_shrinks_others_share_until_cleared() -> None:
    pool, _ = _pool(8, a=1, b=1)
    assert pool.try_acquire("a", 8) == 8
    assert pool.try_acquire("b", 8) == 0  # no permit free, but b's demand is recorded
    assert pool.fair_share("a") == 4
    pool.release("a", 8)
    assert pool.try_acquire("a", 8) == 4  # b still contends
    pool.clear_demand("b")
    assert pool.try_acquire("a", 8) == 4  # b gone: a may take the rest


def test_lone_contender_takes_the_whole_pool() -> None:
    pool, _ = _pool(9, a=1, b=5, c=100)
    assert pool.try_acquire("a", 100) == 9
    assert pool.available == 0 and pool.fair_share("a") == 9


def test_grantable_counts_the_asker_as_a_contender() -> None:
    pool, _ = _pool(10, a=1, b=1)
    assert pool.grantable("a") == 10
    pool.try_acquire("b", 3)
    assert pool.grantable("a") == 5  # would split with b
    assert pool.grantable("b") == 7  # alone: share 10, holds 3


# -- release -----------------------------------------------------------------------------


def test_over_release_raises_and_changes_nothing() -> None:
    pool, _ = _pool(5, a=1)
    pool.try_acquire("a", 2)
    with pytest.raises(RuntimeError, match="exceeds 2 held"):
        pool.release("a", 3)
    with pytest.raises(ValueError, match="negative"):
        pool.release("a", -1)
    assert pool.held("a") == 2
    pool.release("a", 0)
    assert pool.held("a") == 2


# -- wake-ups (beyond the record) -------------------------------------------------------


def test_release_wakes_other_queues_with_unmet_demand_and_self() -> None:
    pool, wakes = _pool(4, a=1, b=1, c=1)
    assert pool.try_acquire("a", 4) == 4
    assert pool.try_acquire("b", 2) == 0  # b waits with demand; c never asked
    wakes.take()
    pool.release("a", 1)
    assert wakes.take() == ["b", "a"]  # others first, then the releasing queue; never c


def test_release_does_not_wake_queues_without_demand() -> None:
    pool, wakes = _pool(4, a=1, b=1)
    pool.try_acquire("a", 4)
    pool.try_acquire("b", 1)
    pool.clear_demand("b")
    wakes.take()
    pool.release("a", 2)
    assert wakes.take() == ["a"]


def test_release_does_not_wake_a_queue_already_at_its_share() -> None:
    pool, wakes = _pool(4, a=1, b=1)
    assert pool.try_acquire("a", 4) == 4
    assert pool.try_acquire("b", 4) == 0
    pool.release("a", 2)
    assert pool.try_acquire("b", 4) == 2  # b at its share of 2
    pool.release("a", 1)  # a at 1, b at 2 = its share
    wakes.take()
    pool.release("a", 1)
    assert wakes.take() == ["a"]


def test_returning_unused_permits_does_not_wake_the_returner() -> None:
    pool, wakes = _pool(4, a=1, b=1)
    pool.try_acquire("b", 4)  # b takes everything
    pool.try_acquire("a", 2)  # a waits
    wakes.take()
    pool.release("b", 3, wake_self=False)
    assert wakes.take() == ["a"]


def test_clearing_demand_wakes_queues_whose_share_grew() -> None:
    pool, wakes = _pool(4, a=1, b=1)
    assert pool.try_acquire("a", 4) == 4
    assert pool.try_acquire("b", 4) == 0
    pool.release("a", 2)  # a at 2 = share with b contending
    assert pool.try_acquire("a", 4) == 0
    wakes.take()
    pool.clear_demand("b")  # b found nothing: a's share is the whole pool again
    assert wakes.take() == ["a"]
    pool.clear_demand("b")  # no change, no wake
    assert wakes.take() == []


def test_wake_switch_off_restores_the_record_behaviour() -> None:
    pool, wakes = _pool(4, a=1, b=1)
    pool._wake_others = False
    pool.try_acquire("a", 4)
    pool.try_acquire("b", 4)
    wakes.take()
    pool.release("a", 1)
    assert wakes.take() == ["a"]
    pool.release("a", 1, wake_self=False)
    assert wakes.take() == []


def test_nothing_is_woken_when_nothing_is_free() -> None:
    pool, wakes = _pool(2, a=1, b=1)
    pool.try_acquire("a", 2)
    pool.try_acquire("b", 2)
    wakes.take()
    pool.clear_demand("a")  # a still holds everything: no share can be used
    assert wakes.take() == []


# -- QueuePermits ------------------------------------------------------------------------


def _weighted(
    total: int, **queues: tuple[int, int]
) -> tuple[dict[str, QueuePermits], OverflowPool, Wakes]:
    weights = {name: weight for name, (_, weight) in queues.items()}
    pool = OverflowPool(total, weights, clock=Clock())  # no time passes: credits tie
    wakes = Wakes()
    permits = {}
    for name, (local, weight) in queues.items():
        permits[name] = QueuePermits(name, local, pool, weight)
        permits[name].subscribe(wakes.of(name))
    return permits, pool, wakes


def test_local_permits_are_taken_first() -> None:
    permits, pool, _ = _weighted(5, a=(2, 1))
    a = permits["a"]
    assert a.try_acquire(1) == Grant(local=1)
    assert pool.demand("a") == 0  # local covered it: no overflow demand
    assert a.try_acquire(4) == Grant(local=1, overflow=3)
    assert pool.demand("a") == 3
    assert a.held == 5 and a.in_flight == 0  # reserved by a claim, not yet handed to jobs
    assert a.available == 2


def test_min_workers_are_available_while_another_queue_holds_the_pool() -> None:
    permits, pool, _ = _weighted(6, a=(0, 1), b=(3, 1))
    assert permits["a"].try_acquire(100) == Grant(overflow=6)
    assert pool.available == 0
    assert permits["b"].try_acquire(100) == Grant(local=3)


def test_one_loaded_queue_reaches_its_min_plus_the_whole_overflow() -> None:
    permits = build_permits([("a", 50, 2, 1), ("b", 50, 3, 4)], global_max_workers=10)
    grant = permits["a"].try_acquire(100)
    assert grant.total == 2 + 5 and permits["a"].held == 7


def test_split_keeps_local_first_and_releases_the_unused() -> None:
    permits, pool, wakes = _weighted(3, a=(2, 1), b=(0, 1))
    a = permits["a"]
    grant = a.try_acquire(5)
    assert grant == Grant(local=2, overflow=3)
    assert permits["b"].try_acquire(3) == Grant()  # b waits for overflow
    wakes.take()
    kept = a.split(grant, 3)
    assert [p._overflow for p in kept] == [False, False, True]
    assert a.in_flight == a.held == 3 and pool.held("a") == 1
    assert wakes.take() == ["b"]  # the returned overflow wakes b, not a


def test_split_of_a_local_only_grant_wakes_nobody() -> None:
    permits, _, wakes = _weighted(0, a=(3, 1))
    grant = permits["a"].try_acquire(3)
    assert permits["a"].split(grant, 0) == []
    assert permits["a"].in_flight == 0 and wakes.take() == []


def test_permit_release_is_idempotent_and_wakes_its_queue() -> None:
    permits, pool, wakes = _weighted(2, a=(1, 1))
    a = permits["a"]
    local, overflow = a.split(a.try_acquire(2), 2)
    wakes.take()
    local.release()
    local.release()
    assert a.in_flight == 1 and wakes.take() == ["a"]
    overflow.release()
    overflow.release()
    assert a.in_flight == 0 and pool.held("a") == 0 and wakes.take() == ["a"]


def test_releasing_an_overflow_permit_wakes_other_waiting_queues() -> None:
    permits, _, wakes = _weighted(2, a=(0, 1), b=(0, 1), c=(0, 1))
    (p1, p2) = permits["a"].split(permits["a"].try_acquire(2), 2)
    assert permits["b"].try_acquire(4) == Grant()
    wakes.take()
    p1.release()
    assert wakes.take() == ["b", "a"]
    assert permits["b"].try_acquire(4) == Grant(overflow=1)
    p2.release()  # b at its share of 1 now; c has no demand
    assert wakes.take() == ["a"]


def test_queue_permits_over_release_raises_and_changes_nothing() -> None:
    permits, pool, _ = _weighted(2, a=(1, 1))
    a = permits["a"]
    a.try_acquire(2)
    with pytest.raises(RuntimeError, match="local release"):
        a.release(Grant(local=2))
    with pytest.raises(RuntimeError, match="overflow release"):
        a.release(Grant(local=1, overflow=2))
    with pytest.raises(ValueError, match="negative"):
        a.release(Grant(local=-1))
    assert a.held == 2 and pool.held("a") == 1


def test_try_acquire_of_nothing_reserves_nothing() -> None:
    permits, _, _ = _weighted(2, a=(1, 1))
    assert permits["a"].try_acquire(0) == Grant()
    assert permits["a"].try_acquire(-4) == Grant()
    assert permits["a"].in_flight == 0


def test_clear_demand_stops_contending() -> None:
    permits, pool, _ = _weighted(4, a=(0, 1), b=(0, 1))
    b = permits["b"]
    grant = b.try_acquire(1)
    assert grant == Grant(overflow=1) and pool.grantable("a") == 2
    b.split(grant, 0)  # the claim found nothing: b still has demand until it clears it
    assert pool.grantable("a") == 2
    b.clear_demand()
    assert pool.grantable("a") == 4 and not pool.contending("b")


def test_hard_reserved_permits_are_max_workers_each() -> None:
    permits = build_permits([("a", 3, 0, 1), ("b", 2, 0, 1)], global_max_workers=None)
    a, b = permits["a"], permits["b"]
    wakes = Wakes()
    a.subscribe(wakes.of("a"))
    b.subscribe(wakes.of("b"))
    assert not a.weighted and a.capacity() == awa.HardReserved(3)
    kept = a.split(a.try_acquire(10), 10)
    assert len(kept) == 3 and a.try_acquire(1) == Grant() and a.available == 0
    assert b.try_acquire(10).total == 2
    a.clear_demand()  # no pool: nothing to clear
    kept[0].release()
    assert wakes.take() == ["a"] and a.available == 1


def test_weighted_capacity_shows_live_overflow_held() -> None:
    permits = build_permits([("a", 50, 1, 3), ("b", 50, 1, 1)], global_max_workers=6)
    a = permits["a"]
    assert a.weighted and a.capacity() == awa.Weighted(1, 3, 0)
    kept = a.split(a.try_acquire(3), 3)
    assert a.capacity() == awa.Weighted(min_workers=1, weight=3, overflow_held=2)
    for permit in kept:
        permit.release()
    assert a.capacity() == awa.Weighted(1, 3, 0)


def test_woken_queues_are_ordered_by_the_share_they_went_without() -> None:
    clock = Clock()
    pool, wakes = _pool(12, clock, a=1, b=1, c=2)
    assert pool.try_acquire("a", 12) == 12
    assert pool.try_acquire("b", 12) == 0
    assert pool.try_acquire("c", 12) == 0
    clock.now = 1.0  # exact shares 3, 3, 6: c went without 6, b 3; a, charged its ceil 3, 0
    pool.release("a", 4)
    assert wakes.take() == ["c", "b", "a"]
    assert pool.try_acquire("c", 12) == 4
    clock.now = 5.0  # c still short 2 a second (6 due, 4 held), b 3 a second: b first
    pool.release("a", 1)
    assert wakes.take() == ["b", "c", "a"]


def test_a_queue_whose_share_is_below_one_permit_comes_first_in_its_turn() -> None:
    """Weights 1 and 10 over 4: the light queue's exact share is 0.36. By how far each
    held below its share at the moment, it never came first; the heavy queue kept its
    ceil of 4 and the light one ran nothing (a review). Its credit grows while it waits."""
    clock = Clock()
    pool, wakes = _pool(4, clock, light=1, heavy=10)
    assert pool.try_acquire("heavy", 8) == 4
    assert pool.try_acquire("light", 8) == 0
    clock.now = 3.0  # light went without 3 × 4/11 ≈ 1.1 permit-seconds, heavy over by as much
    pool.release("heavy", 1)
    assert wakes.take() == ["light", "heavy"]
    assert sorted(["heavy", "light"], key=pool.urgency) == ["light", "heavy"]
    assert pool.try_acquire("light", 8) == 1
    clock.now = 6.0  # holding 1 against 0.36, its credit is spent
    pool.release("light", 1)
    assert wakes.take() == ["heavy", "light"]


def test_permits_taken_while_alone_are_no_debt() -> None:
    """A queue that took the whole pool while it asked alone holds it until its handlers
    end: charged for all of it, it owed a minute of the pool and ran nothing meanwhile (a
    review). It is charged no more than its ceil share."""
    clock = Clock()
    weights = {"slow": 1, **{f"f{i}": 1 for i in range(9)}}
    pool, _ = _pool(16, clock, **weights)
    assert pool.try_acquire("slow", 16) == 16  # alone, for now
    for queue in weights:
        pool.try_acquire(queue, 8)  # all ask: exact shares 1.6, ceil 2
    clock.now = 5.0  # slow's handlers run 5 s
    debt, _ = pool.urgency("slow")
    assert debt == pytest.approx((2 - 1.6) * 5)  # charged 2 a second, not 16


def test_a_change_of_the_division_bills_from_then_on_not_before() -> None:
    """A queue that ran alone for a minute, then shared the pool: billed its new, smaller
    cap for the whole minute, it took credit it never earned (a review: +50 % for a
    minute after)."""
    clock = Clock()
    pool, _ = _pool(4, clock, a=1, b=1, c=1)
    assert pool.try_acquire("a", 8) == 4
    clock.now = 60.0  # alone: entitled to all 4, charged all 4
    assert pool.try_acquire("b", 8) == 0
    assert pool.try_acquire("c", 8) == 0
    credit = -pool.urgency("a")[0]
    assert credit == pytest.approx(0.0)


def test_of_two_queues_with_the_same_credit_the_one_granted_longer_ago_goes_first() -> None:
    """Equal weights, released together: by a fixed order the same queue kept the spare
    permit (a review: +49 % for one of three equal queues)."""
    pool, _ = _pool(4, a=1, b=1, c=1)
    assert pool.try_acquire("a", 8) == 4
    assert pool.try_acquire("b", 8) == 0
    assert pool.try_acquire("c", 8) == 0
    pool.release("a", 4)  # no time passed: every credit is zero
    assert sorted(["a", "b", "c"], key=pool.urgency)[-1] == "a"  # granted most recently


class _Rider:
    """A dispatcher as the completer sees it: always riding, reserving what it may."""

    def __init__(self, queue: str, pool: OverflowPool, order: list[str]) -> None:
        self.queue, self._pool, self._order = queue, pool, order

    def rides_next(self) -> bool:
        return True

    def ride(self) -> object:
        self._order.append(self.queue)
        return self._pool.try_acquire(self.queue, 8) or None


def test_claims_riding_on_a_write_reserve_the_pool_in_credit_order() -> None:
    """In a fixed order, the queue listed first took every freed permit at each write."""
    from awa.worker.completer import Completer

    clock = Clock()
    pool, _ = _pool(4, clock, light=1, heavy=10)
    assert pool.try_acquire("heavy", 8) == 4
    assert pool.try_acquire("light", 8) == 0
    clock.now = 3.0
    pool.release("heavy", 1)
    order: list[str] = []
    completer = Completer(None)  # type: ignore[arg-type]  # no write happens here
    riders = [_Rider(q, pool, order) for q in ("heavy", "light")]
    completer.ride_with(riders, pool)  # type: ignore[arg-type]
    rides = completer._reserve_rides()
    assert order == ["light", "heavy"]
    assert [rider.queue for rider, _ in rides] == ["light"]


# -- live resizing (CONTRACT §10) ------------------------------------------------------


def test_shrinking_local_permits_takes_nothing_back_and_growing_wakes() -> None:
    permits = QueuePermits("q", 10)
    wakes = Wakes()
    permits.subscribe(wakes.of("q"))
    held = permits.split(permits.try_acquire(10), 10)
    permits.resize(3)
    assert permits.in_flight == 10 and permits.available == 0
    assert permits.try_acquire(5).total == 0  # over its new size: nothing new
    for permit in held[:8]:
        permit.release()
    assert permits.available == 1  # 2 still run; 3 − 2
    assert permits.try_acquire(5).total == 1
    wakes.take()
    permits.resize(8)
    assert wakes.take() == ["q"]  # grown: its dispatcher polls at once
    permits.resize(4)
    assert wakes.take() == []  # shrunk: nobody to wake


def test_a_smaller_pool_grants_nothing_until_enough_is_released() -> None:
    pool, wakes = _pool(10, a=1, b=1)
    assert pool.try_acquire("a", 10) == 10
    pool.resize(4)
    assert pool.available == 0 and pool.try_acquire("b", 2) == 0
    pool.release("a", 7)  # 3 held of 4: one free
    assert pool.try_acquire("b", 2) == 1
    wakes.take()
    pool.resize(8)
    assert "b" in wakes.take()  # b still asks and is below its share


def test_a_new_weight_moves_the_shares() -> None:
    pool, _ = _pool(12, a=1, b=1)
    pool.try_acquire("a", 1)
    pool.try_acquire("b", 1)
    assert (pool.fair_share("a"), pool.fair_share("b")) == (6, 6)
    pool.set_weight("a", 3)
    assert (pool.fair_share("a"), pool.fair_share("b")) == (9, 3)
    with pytest.raises(ValueError, match="weights must be >= 1"):
        pool.set_weight("a", 0)


def test_weighted_permits_resize_their_minimum_and_weight() -> None:
    permits = build_permits([("a", 0, 2, 1), ("b", 0, 2, 1)], 10)
    permits["a"].resize(5, 3)
    assert permits["a"].local_capacity == 5 and permits["a"].weight == 3
    assert permits["a"].capacity() == awa.Weighted(min_workers=5, weight=3, overflow_held=0)


# -- live minimums never take the process past global_max_workers (CONTRACT §7, §10) ------


def _live_min(permits: dict[str, QueuePermits], queue: str, minimum: int, global_max: int) -> None:
    """What the worker does on a min_workers override: resize the queue, then the pool."""
    permits[queue].resize(minimum)
    pool = permits[queue].pool
    assert pool is not None
    pool.resize(global_max - sum(p.local_capacity for p in permits.values()))


def _held(permits: dict[str, QueuePermits]) -> int:
    return sum(p.held for p in permits.values())


def test_a_shrunk_minimum_still_held_counts_against_the_grown_pool() -> None:
    permits = build_permits([("a", 50, 5, 1), ("b", 50, 0, 1)], global_max_workers=10)
    wakes = Wakes()
    permits["b"].subscribe(wakes.of("b"))
    assert permits["a"].try_acquire(5) == Grant(local=5)
    assert permits["b"].try_acquire(100) == Grant(overflow=5)
    _live_min(permits, "a", 0, 10)  # the pool grows to 10; a still runs its 5
    assert permits["b"].try_acquire(100) == Grant()  # not 5 more: 15 would run at once
    assert _held(permits) == 10
    wakes.take()
    permits["a"].release(Grant(local=1))  # one of a's jobs ends: room for one
    assert wakes.take() == ["b"]
    assert permits["b"].try_acquire(100) == Grant(overflow=1) and _held(permits) == 10


def test_a_grown_minimum_waits_for_overflow_held_above_the_shrunk_pool() -> None:
    permits = build_permits([("a", 50, 0, 1), ("b", 50, 0, 1)], global_max_workers=10)
    assert permits["b"].try_acquire(100) == Grant(overflow=10)
    _live_min(permits, "a", 5, 10)  # the pool shrinks to 5; b still runs 10
    assert permits["a"].try_acquire(5) == Grant()  # its minimum waits for b's jobs
    permits["b"].release(Grant(overflow=6))
    assert permits["a"].try_acquire(5) == Grant(local=5) and _held(permits) == 9


def test_a_batch_its_minimum_covers_keeps_a_saturated_queue_contending() -> None:
    """Global 10: a (min 2, weight 5) and b (min 1, weight 3) share an overflow of 7. With
    claims of 2, a's minimum covers every other claim of its; before, each such claim
    set a's overflow demand to 0, a dropped out of the contending weight, and b's share
    grew to the whole pool while a still had a backlog."""
    permits = build_permits([("a", 50, 2, 5), ("b", 50, 1, 3)], 10)
    a, b = permits["a"], permits["b"]
    first = a.try_acquire(2)
    assert first == Grant(2, 0)  # its minimum
    assert a.try_acquire(2).overflow == 2  # saturated: it asks the pool
    a.release(first, wake_self=False)  # those two jobs ended; a asks again, covered
    assert a.try_acquire(2) == Grant(2, 0)
    assert a._pool is not None and a._pool.demand("a") == 2  # still contending
    assert b.try_acquire(512).overflow == 3  # ceil(7 × 3/8): not the whole pool
