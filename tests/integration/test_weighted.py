"""The two concurrency modes on real PostgreSQL (design record 011, CONTRACT §4, §7.2–7.5).

Handlers hold until the test opens their queue's gate, and count what runs per queue, so
every assertion is about in-flight counts after a known set of completions — never about
time. Waves of completions stand in for "one handler duration".
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any

import awa
from tests.helpers import wait_for

FAST = {"poll_interval_ms": 50, "promote_interval_ms": 50}


class Gates:
    """Handlers of each queue wait at a gate; the test lets exactly N of them through."""

    def __init__(self, client: awa.AsyncClient, *queues: str) -> None:
        self.running = dict.fromkeys(queues, 0)
        self.finished = dict.fromkeys(queues, 0)
        self.peak = dict.fromkeys(queues, 0)
        self.peak_total = 0
        self._gates = {q: asyncio.Semaphore(0) for q in queues}
        for queue in queues:
            client.task(None, kind=f"hold_{queue}", queue=queue)(self._handler(queue))

    def _handler(self, queue: str) -> Callable[[awa.Job[Any]], Any]:
        async def hold(job: awa.Job[Any]) -> None:
            self.running[queue] += 1
            self.peak[queue] = max(self.peak[queue], self.running[queue])
            self.peak_total = max(self.peak_total, self.total)
            try:
                await self._gates[queue].acquire()
            finally:
                self.running[queue] -= 1
                self.finished[queue] += 1

        return hold

    @property
    def total(self) -> int:
        return sum(self.running.values())

    def release(self, queue: str, n: int) -> None:
        """Let ``n`` waiting handlers of ``queue`` finish (never more than are running)."""
        assert n <= self.running[queue], (queue, n, self.running)
        for _ in range(n):
            self._gates[queue].release()

    def open_all(self) -> None:
        """Let everything finish (before shutdown)."""
        for gate in self._gates.values():
            for _ in range(10_000):
                gate.release()

    async def settled(self, done: dict[str, int] | None = None, **expected: int) -> bool:
        """True when exactly ``expected`` handlers run per named queue (after ``done``
        handlers per queue have finished, when given)."""
        if done is not None and any(self.finished[q] != n for q, n in done.items()):
            return False
        return all(self.running[q] == n for q, n in expected.items())


async def _load(client: awa.AsyncClient, queue: str, n: int, **opts: Any) -> list[int]:
    jobs = await client.insert_many(
        [{"i": i} for i in range(n)], kind=f"hold_{queue}", queue=queue, **opts
    )
    return [job.id for job in jobs]


async def _stop(client: awa.AsyncClient, gates: Gates) -> None:
    gates.open_all()
    await client.shutdown(timeout_ms=5_000)


def _pool(client: awa.AsyncClient) -> Any:
    return client._worker.dispatchers[next(iter(client._worker.dispatchers))].permits._pool


# -- weighted mode -----------------------------------------------------------------------


async def test_lone_queue_takes_its_min_plus_the_whole_pool_and_never_more(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b")
    await _load(client, "a", 40)
    queues = [awa.QueueConfig("a", min_workers=2), awa.QueueConfig("b", min_workers=3)]
    await client.start(queues, global_max_workers=10, **FAST)
    try:
        for wave in range(5):  # 2 local + (10 − 2 − 3) overflow, refilled after each wave
            await wait_for(lambda wave=wave: gates.settled({"a": 7 * wave}, a=7, b=0))
            gates.release("a", 7)
        await wait_for(lambda: gates.settled({"a": 35}, a=5, b=0))  # the last 5 jobs
        assert gates.peak == {"a": 7, "b": 0} and gates.peak_total == 7
    finally:
        await _stop(client, gates)


async def test_min_workers_are_there_at_once_while_another_queue_holds_the_pool(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b")
    await _load(client, "a", 20)
    queues = [awa.QueueConfig("a", min_workers=0), awa.QueueConfig("b", min_workers=3)]
    await client.start(queues, global_max_workers=8, **FAST)
    try:
        await wait_for(lambda: gates.settled(a=5, b=0))  # a holds the whole overflow pool
        assert _pool(client).available == 0
        await _load(client, "b", 10)
        await wait_for(lambda: gates.settled(a=5, b=3))  # no job of a had to finish
        assert gates.finished == {"a": 0, "b": 0}
        assert gates.peak_total == 8
    finally:
        await _stop(client, gates)


async def test_saturated_queues_weighted_3_to_1_hold_their_shares(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b")
    await _load(client, "a", 120)
    await _load(client, "b", 120)
    queues = [
        awa.QueueConfig("a", min_workers=2, weight=3),
        awa.QueueConfig("b", min_workers=2, weight=1),
    ]
    await client.start(queues, global_max_workers=20, **FAST)
    ideal = {"a": 2 + 12, "b": 2 + 4}  # overflow 16 split 3:1
    rng = random.Random(11)  # which handlers finish in each wave: varied, but reproducible
    samples: list[dict[str, int]] = []
    try:
        await wait_for(lambda: _at(gates, total=20))
        for _ in range(16):
            done = dict(gates.finished)
            wave = {q: rng.randint(1, min(4, gates.running[q])) for q in ("a", "b")}
            for queue, n in wave.items():
                gates.release(queue, n)
            await wait_for(
                lambda done=done, wave=wave: _at(
                    gates, total=20, finished={q: done[q] + wave[q] for q in wave}
                )
            )
            samples.append(dict(gates.running))
        steady = samples[6:]  # the incumbents' surplus has drained by then
        for queue, target in ideal.items():
            mean = sum(s[queue] for s in steady) / len(steady)
            assert abs(mean - target) <= 0.15 * target, (queue, mean, target, samples)
            assert all(abs(s[queue] - target) <= 0.15 * target for s in steady), samples
        assert gates.peak_total == 20
    finally:
        await _stop(client, gates)


async def _at(gates: Gates, *, total: int, finished: dict[str, int] | None = None) -> bool:
    if finished is not None and any(gates.finished[q] != n for q, n in finished.items()):
        return False
    return gates.total == total


async def test_a_newcomer_converges_by_wake_ups_within_one_handler_duration(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b")
    await _load(client, "a", 40)
    # b polls once a minute and overrides are re-read as rarely: only wake-ups (the
    # insert notice, then permits freed in the pool) can move it.
    queues = [
        awa.QueueConfig("a", min_workers=0, poll_interval_ms=50),
        awa.QueueConfig("b", min_workers=2, poll_interval_ms=60_000),
    ]
    await client.start(
        queues, global_max_workers=12, override_refresh_ms=60_000, promote_interval_ms=50
    )
    try:
        await wait_for(lambda: gates.settled(a=10, b=0))
        await _load(client, "b", 40)
        await wait_for(lambda: gates.settled(a=10, b=2))  # its minimum at once
        gates.release("a", 10)  # every handler of a finishes once: one handler duration
        await wait_for(lambda: gates.settled({"a": 10, "b": 0}, a=5, b=7))  # 10 split 1:1
        assert _pool(client).held("b") == 5 and gates.peak_total == 12
    finally:
        await _stop(client, gates)


async def test_permits_come_back_after_raise_cancel_and_thread_crash(
    client: awa.AsyncClient,
) -> None:
    calls = {"async_raise": 0, "sync_raise": 0, "ok": 0}
    lock = threading.Lock()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @client.task(None, kind="async_raise", queue="q")
    async def async_raise(job: awa.Job[Any]) -> None:
        calls["async_raise"] += 1
        raise ValueError("boom")

    @client.task(None, kind="sync_raise", queue="q")
    def sync_raise(job: awa.Job[Any]) -> None:
        with lock:
            calls["sync_raise"] += 1
        raise RuntimeError("thread crash")

    @client.task(None, kind="blocker", queue="q")
    async def blocker(job: awa.Job[Any]) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @client.task(None, kind="ok", queue="q")
    async def ok(job: awa.Job[Any]) -> None:
        calls["ok"] += 1

    await client.insert_many(
        [{"i": i} for i in range(6)], kind="async_raise", queue="q", max_attempts=1
    )
    await client.insert_many(
        [{"i": i} for i in range(6)], kind="sync_raise", queue="q", max_attempts=1
    )
    await client.start([awa.QueueConfig("q")], global_max_workers=2, **FAST)
    try:
        # 12 failures through 2 permits: each one's permit came back for the next.
        await wait_for(lambda: _count(client, "q", failed=12))
        assert calls == {"async_raise": 6, "sync_raise": 6, "ok": 0}
        blocked = await client.insert({}, kind="blocker", queue="q")
        await wait_for(lambda: _flag(started))
        await client.cancel(blocked.id)
        await wait_for(lambda: _flag(cancelled))
        await client.insert_many([{"i": i} for i in range(4)], kind="ok", queue="q")
        await wait_for(lambda: _count(client, "q", completed=4))
        await wait_for(lambda: _idle(client, "q"))
    finally:
        await client.shutdown(timeout_ms=5_000)
    assert (await client.get_job(blocked.id)).state is awa.JobState.CANCELLED


async def _flag(event: asyncio.Event) -> bool:
    return event.is_set()


async def _count(client: awa.AsyncClient, queue: str, **expected: int) -> bool:
    stats = {s.queue: s for s in await client.queue_stats()}
    return queue in stats and all(getattr(stats[queue], k) == v for k, v in expected.items())


async def _idle(client: awa.AsyncClient, queue: str) -> bool:
    health = (await client.health_check()).queues[queue]
    capacity = health.capacity
    return (
        health.in_flight == 0 and isinstance(capacity, awa.Weighted) and not capacity.overflow_held
    )


async def test_health_and_snapshot_show_weighted_capacity_with_live_overflow(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b")
    await _load(client, "a", 5)
    queues = [
        awa.QueueConfig("a", min_workers=1, weight=3),
        awa.QueueConfig("b", min_workers=1, weight=1),
    ]
    await client.start(queues, global_max_workers=6, **FAST)
    try:
        await wait_for(lambda: gates.settled(a=5))
        health = await client.health_check()
        assert health.queues["a"].capacity == awa.Weighted(min_workers=1, weight=3, overflow_held=4)
        assert health.queues["a"].in_flight == 5 and health.queues["a"].available == 0
        assert health.queues["b"].capacity == awa.Weighted(1, 1, 0)
        assert health.queues["b"].in_flight == 0  # b polls, but runs nothing
        snapshot = client.runtime_snapshot()
        assert snapshot.mode == "weighted" and snapshot.global_max_workers == 6
        assert snapshot.queues["a"].capacity == awa.Weighted(1, 3, 4)
        assert snapshot.queues["a"].in_flight == 5
        gates.release("a", 5)
        await wait_for(lambda: _count(client, "a", completed=5))
        await wait_for(lambda: _idle(client, "a"))
        assert client.runtime_snapshot().queues["a"].capacity == awa.Weighted(1, 3, 0)
    finally:
        await _stop(client, gates)


# -- hard-reserved mode ------------------------------------------------------------------


async def test_hard_reserved_queues_never_exceed_their_max_workers(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b")
    await _load(client, "a", 20)
    await _load(client, "b", 20)
    await client.start([("a", 3), ("b", 2)], **FAST)
    try:
        for wave in range(4):
            await wait_for(lambda wave=wave: gates.settled({"a": 3 * wave, "b": wave}, a=3, b=2))
            gates.release("a", 3)
            gates.release("b", 1)
        await wait_for(lambda: gates.settled({"a": 12, "b": 4}, a=3, b=2))
        assert gates.peak == {"a": 3, "b": 2}
        health = await client.health_check()
        assert health.queues["a"].capacity == awa.HardReserved(3)
        assert health.queues["a"].in_flight == 3 and health.queues["a"].available == 0
        assert client.runtime_snapshot().queues["b"].capacity == awa.HardReserved(max_workers=2)
    finally:
        await _stop(client, gates)


async def test_a_queue_that_cannot_use_more_does_not_shrink_the_others_share(
    client: awa.AsyncClient,
) -> None:
    gates = Gates(client, "a", "b", "c")
    await _load(client, "a", 1)  # a trickle: one job, then nothing
    queues = [awa.QueueConfig(q) for q in ("a", "b", "c")]
    await client.start(queues, global_max_workers=10, **FAST)
    try:
        await wait_for(lambda: gates.settled(a=1))
        await _load(client, "b", 40)
        await wait_for(lambda: gates.settled(a=1, b=9))  # not ceil(10 / 2) = 5
        await _load(client, "c", 40)  # a real contender: b and c split what a leaves
        await wait_for(lambda: _asks(client, "c"))  # c polled, found the pool full
        gates.release("b", 9)
        await wait_for(lambda: gates.settled({"b": 9}, a=1))
        await wait_for(lambda: _split(gates, ("b", "c"), 9))
        assert sorted((gates.running["b"], gates.running["c"])) == [4, 5]  # ceil(9 / 2)
        assert gates.peak_total == 10
    finally:
        await _stop(client, gates)


async def _split(gates: Gates, queues: tuple[str, ...], total: int) -> bool:
    return sum(gates.running[q] for q in queues) == total


async def _asks(client: awa.AsyncClient, queue: str) -> bool:
    return bool(_pool(client).demand(queue) > 0)
