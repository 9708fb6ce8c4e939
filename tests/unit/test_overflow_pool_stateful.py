"""Random acquire / split / release / clear sequences against the permits, with the
invariants of design record 011 checked after every step (CONTRACT §7.2–7.5)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from awa.worker.permits import Grant, OverflowPool, Permit, QueuePermits

NAMES = ("a", "b", "c", "d")


class PermitsMachine(RuleBasedStateMachine):
    """A model of what each queue should hold, next to the real pool and permits."""

    pending = Bundle("pending")  # (queue, Grant) reserved by a poll, not yet split
    permits = Bundle("permits")  # (queue, Permit) handed to a job

    def __init__(self) -> None:
        super().__init__()
        self.pool = OverflowPool(0, {})
        self.queues: dict[str, QueuePermits] = {}
        self.woken: list[str] = []
        # The model: overflow and local permits each queue has out (pending or running).
        self.overflow_out: dict[str, int] = {}
        self.local_out: dict[str, int] = {}
        self.running: dict[str, int] = {}  # permits handed to jobs and not yet released
        self.weights: dict[str, int] = {}

    @initialize(
        total=st.integers(0, 12),
        shape=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), min_size=1, max_size=4),
    )
    def build(self, total: int, shape: list[tuple[int, int]]) -> None:
        names = NAMES[: len(shape)]
        self.pool = OverflowPool(total, {n: w for n, (_, w) in zip(names, shape, strict=True)})
        for name, (local, weight) in zip(names, shape, strict=True):
            permits = QueuePermits(name, local, self.pool, weight)
            permits.subscribe(lambda name=name: self.woken.append(name))
            self.queues[name] = permits
            self.overflow_out[name] = self.local_out[name] = self.running[name] = 0
            self.weights[name] = weight

    def _share(self, queue: str) -> int:
        """ADR 0005's fair share, from the model's own weights and the pool's observable
        demand and holdings (not the pool's running totals or its own formula): the pool
        less what non-asking queues hold, split by weight among the asking ones."""
        asking = [q for q in self.queues if self.pool.demand(q) > 0]
        settled = sum(self.pool.held(q) for q in self.queues if q not in asking)
        divisible = self.pool.total - settled
        weight = sum(self.weights[q] for q in asking)
        if weight == 0:
            return divisible
        return -(-divisible * self.weights[queue] // weight)  # ceil, in integers

    def _queue(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.queues)))

    def _others_ask(self, queue: str) -> bool:
        return any(self.pool.demand(q) > 0 for q in self.queues if q != queue)

    # -- rules ---------------------------------------------------------------------------

    @rule(target=pending, data=st.data(), wanted=st.integers(0, 15))
    def acquire(self, data: st.DataObject, wanted: int) -> tuple[str, Grant]:
        queue = self._queue(data)
        permits = self.queues[queue]
        free_local = permits.local_capacity - self.local_out[queue]
        available = self.pool.available
        lone = not self._others_ask(queue)
        demand_before = self.pool.demand(queue)
        grant = permits.try_acquire(wanted)
        assert grant.local == min(wanted, free_local), "local permits are taken first"
        asked = wanted - grant.local
        # A request its local permits cover leaves the overflow demand as it stood; a
        # request for nothing clears it.
        expected = asked if asked or wanted == 0 else demand_before
        assert self.pool.demand(queue) == expected
        if grant.overflow:
            assert self.pool.held(queue) <= self._share(queue), "above fair share"
        if lone:
            # alone in asking: everything nobody holds (the whole pool when nobody does)
            assert grant.overflow == min(asked, available), "a lone contender takes all"
        self.local_out[queue] += grant.local
        self.overflow_out[queue] += grant.overflow
        return queue, grant

    @rule(target=permits, item=consumes(pending), data=st.data())
    def split(self, item: tuple[str, Grant], data: st.DataObject) -> object:
        queue, grant = item
        keep = data.draw(st.integers(0, grant.total))
        self.woken.clear()
        kept = self.queues[queue].split(grant, keep)
        assert len(kept) == keep
        assert queue not in self.woken, "returning unused permits woke the returner"
        kept_local = sum(1 for p in kept if not p._overflow)
        assert kept_local == min(keep, grant.local), "local permits are kept first"
        self._check_woken(exclude=queue, released=grant.overflow > keep - kept_local)
        self.local_out[queue] -= grant.local - kept_local
        self.overflow_out[queue] -= grant.overflow - (keep - kept_local)
        self.running[queue] += keep
        if keep < grant.total:  # as the dispatcher: it could not use all it was granted
            self._clear(queue)
        return multiple(*((queue, p) for p in kept))

    @rule(item=permits, twice=st.booleans())
    def release(self, item: tuple[str, Permit], twice: bool) -> None:
        queue, permit = item
        before = (self.queues[queue]._local_used, self.pool.held(queue))
        was_released = permit._released
        self.woken.clear()
        permit.release()
        if twice:
            permit.release()
        if was_released:  # idempotent: a second release changes nothing
            assert (self.queues[queue]._local_used, self.pool.held(queue)) == before
            return
        self.running[queue] -= 1
        if permit._overflow:
            self.overflow_out[queue] -= 1
        else:
            self.local_out[queue] -= 1
        assert self.woken.count(queue) == 1, "a finished job wakes its own dispatcher"
        self._check_woken(exclude=queue, released=permit._overflow)

    @rule(data=st.data())
    def clear_demand(self, data: st.DataObject) -> None:
        self._clear(self._queue(data))

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), extra=st.integers(1, 3))
    def over_release_raises(self, data: st.DataObject, extra: int) -> None:
        queue = self._queue(data)
        held = self.pool.held(queue)
        try:
            self.pool.release(queue, held + extra)
        except RuntimeError:
            pass
        else:
            raise AssertionError("releasing more than held did not raise")
        try:
            self.queues[queue].release(Grant(local=self.local_out[queue] + extra))
        except RuntimeError:
            pass
        else:
            raise AssertionError("releasing more local permits than held did not raise")
        assert self.pool.held(queue) == held

    def _clear(self, queue: str) -> None:
        was_asking = self.pool.demand(queue) > 0
        self.woken.clear()
        self.queues[queue].clear_demand()
        assert self.pool.demand(queue) == 0
        assert queue not in self.woken
        # No longer asking can grow the others' shares: whoever can now gain is woken.
        self._check_woken(exclude=queue, released=was_asking)

    def _check_woken(self, exclude: str, *, released: bool = False) -> None:
        """Only queues with demand that can gain are woken; after a release, all of them."""
        for queue in self.woken:
            if queue != exclude:
                assert self.pool.demand(queue) > 0, f"{queue} woken without demand"
                assert self.pool.held(queue) < self._share(queue), f"{queue} cannot gain"
        if released and self.pool.available > 0:
            for queue in self.queues:
                waiting = self.pool.demand(queue) > 0
                could_gain = self.pool.held(queue) < self._share(queue)
                if queue != exclude and waiting and could_gain:
                    assert queue in self.woken, f"{queue} could gain but was not woken"

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def held_never_exceeds_total(self) -> None:
        assert sum(self.pool.held(q) for q in self.queues) <= self.pool.total
        assert self.pool.available >= 0

    @invariant()
    def running_totals_agree_with_a_recount(self) -> None:
        pool = self.pool
        asking = [q for q in self.queues if pool.demand(q) > 0]
        assert pool.available == pool.total - sum(pool.held(q) for q in self.queues)
        assert pool.contending_weight() == sum(self.queues[q].weight for q in asking)
        assert pool._settled_held() == sum(pool.held(q) for q in self.queues if q not in asking)

    @invariant()
    def counts_match_the_model_and_are_never_negative(self) -> None:
        for queue, permits in self.queues.items():
            assert self.pool.held(queue) == self.overflow_out[queue] >= 0
            assert 0 <= permits._local_used == self.local_out[queue] <= permits.local_capacity
            assert permits.held == self.overflow_out[queue] + self.local_out[queue]
            assert 0 <= permits.in_flight == self.running[queue] <= permits.held


PermitsMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPermits = PermitsMachine.TestCase
