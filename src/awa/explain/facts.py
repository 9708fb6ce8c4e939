"""The facts an explanation is computed from, and the arithmetic on them.

Two reads make a :class:`Facts` (see :mod:`awa.client.explain`): the ``job_explain``
statement (the job row and its queue's numbers, on the database's clock) and the live
workers' runtime snapshots from ``awa.runtime_instances``. Nothing here does I/O.

A snapshot is published every ``runtime_snapshot_interval_ms`` (10 s by default), so its
in-flight counts can be that old; the database's count of the queue's running jobs is
current. Where the two disagree about free permits, the smaller count wins: a permit one
of them says is held is not promised to a waiting job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from awa.types import HardReserved, Job, QueueRuntime, RuntimeInstance, Weighted, bucket_size

AHEAD_CAP = 10_000
"""Counting the jobs ahead stops here (``at least 10 000``): the count stays one
bounded index range however deep the backlog."""
RATE_WINDOW_S = 300.0
"""Completions of the last five minutes give the rate a wait is estimated from …"""
RATE_SAMPLE = 1_000
"""… at most this many of the newest, so a fast queue costs no more than a slow one."""
RATE_SPAN_MIN_S = 1.0
"""The shortest time a rate is taken over (a first completion a moment ago)."""
MAX_PARTITIONS_SCANNED = 1_000
"""The queue page's "oldest waiting job" of a partitioned queue looks at this many keys."""
SNAPSHOT_SLACK = timedelta(seconds=1)
"""A snapshot is built just before it is stored: one stored this soon after a claim may
have been built before it."""


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """What the database says about the job's queue (the counts only for a waiting job)."""

    name: str
    paused: bool
    paused_at: datetime | None
    paused_by: str | None
    ahead: int
    running: int
    completed_recently: int
    completed_since: datetime | None
    # In a partitioned queue, how many of those completions were of the job's partition
    # (None in a queue without partitions).
    completed_in_partition: int | None = None
    # The queue's running jobs, the AHEAD_CAP with the oldest heartbeats: (id, claimed at,
    # partition key), for a waiting job.
    running_jobs: tuple[tuple[int, datetime | None, str | None], ...] = ()

    def completion_rate(self, now: datetime) -> float | None:
        """Jobs completed per second lately in the job's line (its queue, or its
        partition's share of the queue's), or None when there is no rate to tell.

        The completions after the oldest one counted, over the time since it (the newest
        :data:`RATE_SAMPLE` at most): dividing by the whole window made a queue that
        started a minute ago look five times slower than it runs, while counting the
        oldest as well made a slow queue look fast. One completion gives no rate: over
        the whole window it made a queue that had just started look like one job in five
        minutes. A partition's line moves at its share of the queue's completions: the
        queue's rate alone made a partition at its cap look many times faster."""
        if self.completed_recently < 2 or self.completed_since is None:
            return None
        rate = (self.completed_recently - 1) / self.rate_span_s(now)
        if self.completed_in_partition is None:
            return rate
        if self.completed_in_partition == 0:
            return None
        return rate * self.completed_in_partition / self.completed_recently

    def rate_span_s(self, now: datetime) -> float:
        """The seconds :meth:`completion_rate` is taken over."""
        if self.completed_since is None:
            return RATE_WINDOW_S
        span = min((now - self.completed_since).total_seconds(), RATE_WINDOW_S)
        return max(span, RATE_SPAN_MIN_S)


@dataclass(frozen=True, slots=True)
class FleetFacts:
    """The fleet-wide limits that apply to the job (CONTRACT §8–§9), as the database has
    them now; every field None when its limit is not set."""

    concurrency: int | None = None
    rate_limit: float | None = None
    burst: int | None = None
    partition_by: str | None = None
    partition: str | None = None  # the job's key under partition_by
    partition_running: int = 0
    tokens: float | None = None  # in the job's bucket (its partition's, or the queue's)
    updated_at: datetime | None = None
    pool_total: int | None = None  # set when the queue is a member of the fleet pool
    pool_min_workers: int | None = None
    pool_weight: int | None = None
    pool_room: int | None = None  # how many more jobs the pool lets the queue run now
    pool_running: int = 0  # running jobs of every member

    def partition_label(self) -> str:
        """The job's partition as a reader knows it: ``key='value'``."""
        if not self.partition:
            return f"jobs without {self.partition_by}"
        return f"{self.partition_by}={self.partition!r}"

    def turn_s(self, ahead: int) -> float | None:
        """Seconds until the bucket holds a token for a job with ``ahead`` jobs before it,
        or None when it holds them now (or there is no fleet rate limit)."""
        if self.rate_limit is None or self.tokens is None or self.tokens >= ahead + 1:
            return None
        return (ahead + 1 - self.tokens) / self.rate_limit

    @property
    def effective_burst(self) -> int | None:
        """The bucket's size: ``burst``, or ``ceil(rate_limit)`` when none was given."""
        return None if self.rate_limit is None else bucket_size(self.rate_limit, self.burst)


@dataclass(frozen=True, slots=True)
class KeyJob:
    """Another job of the same ordering key: its id, state and queue."""

    id: int
    state: str
    queue: str


@dataclass(frozen=True, slots=True)
class OrderingFacts:
    """Where a job with an ordering key stands in its key's line (ADR 0034), as the claim
    reads it: the unfinished jobs of the key before it, and a started one."""

    key: str
    ahead: int = 0  # unfinished jobs of the key with a lower id (up to AHEAD_CAP)
    first: KeyJob | None = None  # the lowest of them: the key's turn
    started: KeyJob | None = None  # a running or parked job of the key (holds it)


@dataclass(frozen=True, slots=True)
class Serving:
    """One live process that serves the job's queue, with its permits for that queue."""

    instance: RuntimeInstance
    runtime: QueueRuntime
    held: int
    limit: int

    @property
    def free(self) -> int:
        """Permits it could hand a job of the queue now (as of its snapshot)."""
        return max(0, self.limit - self.held)

    @property
    def rate_limit(self) -> float | None:
        """Its effective per-process rate limit for the queue (jobs/s), if any."""
        value = self.runtime.effective.get("rate_limit")
        return float(value) if value is not None else None

    @property
    def poll_interval_ms(self) -> int | None:
        """How often its dispatcher polls the queue when no notice wakes it."""
        value = self.runtime.effective.get("poll_interval_ms")
        return int(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything an explanation may use, read at ``now`` (the database's clock)."""

    job: Job[Any]
    now: datetime
    heartbeat_at: datetime | None
    callback_timeout_at: datetime | None
    dead_lettered_at: datetime | None
    queue: QueueFacts
    live: tuple[RuntimeInstance, ...]
    fleet: FleetFacts = FleetFacts()
    ordering: OrderingFacts | None = None  # None: the job has no ordering key
    callback_id: str | None = None  # a callback its attempt registered and waits for

    def serving(self) -> list[Serving]:
        """The live processes whose snapshot lists the job's queue."""
        found = []
        for instance in self.live:
            snap = instance.snapshot
            if snap is None or self.queue.name not in snap.queues:
                continue
            held, limit = permits_for(instance, self.queue.name)
            found.append(Serving(instance, snap.queues[self.queue.name], held, limit))
        return found

    def runners(
        self, job_id: int, claimed: datetime | None
    ) -> tuple[RuntimeInstance | None, list[RuntimeInstance]]:
        """Who runs the running job ``job_id``: the live process whose snapshot lists it
        (else None), and else the serving processes that may run it without having
        listed it yet — not one started after the claim, nor one whose snapshot was taken
        after it without the job."""
        for instance in self.live:
            if instance.snapshot is not None and job_id in instance.snapshot.running_job_ids:
                return instance, []
        candidates = [s.instance for s in self.serving() if _may_run_unlisted(s.instance, claimed)]
        return None, candidates

    def unattended(self, partition: str | None = None) -> int:
        """How many of the queue's running jobs (of ``partition`` when given) no live
        process runs: the process that claimed them stopped, and they hold their slots
        until the rescuer returns them. Of the :data:`AHEAD_CAP` running jobs with the
        oldest heartbeats only (:meth:`unattended_capped` says when there are more)."""
        listed: set[int] = set()
        for instance in self.live:
            if instance.snapshot is not None:
                listed.update(instance.snapshot.running_job_ids)
        serving = [s.instance for s in self.serving()]
        return sum(
            1
            for job_id, claimed, key in self.queue.running_jobs
            if (partition is None or key == partition)
            and job_id not in listed
            and not any(_may_run_unlisted(i, claimed) for i in serving)
        )

    def unattended_capped(self) -> bool:
        """More jobs run than :meth:`unattended` looked at."""
        return self.queue.running > len(self.queue.running_jobs)

    def free_permits(self) -> int:
        """Permits the serving processes could hand a job of the queue now: the smaller
        of what their snapshots say and what the database's running count leaves."""
        serving = self.serving()
        by_snapshot = sum(s.free for s in serving)
        by_database = sum(s.limit for s in serving) - self.queue.running
        return max(0, min(by_snapshot, by_database))

    def waited_s(self) -> float:
        """How long the job has been due."""
        return max(0.0, (self.now - self.job.run_at).total_seconds())


def overflow_holders(instance: RuntimeInstance, queue: str) -> dict[str, int]:
    """In a weighted process, the other queues holding its shared overflow (name → how
    much): what keeps ``queue`` at its minimum when the overflow is all held."""
    snap = instance.snapshot
    if snap is None or not isinstance(snap.queues[queue].capacity, Weighted):
        return {}
    held = {
        name: _overflow_in_use(q)
        for name, q in sorted(snap.queues.items())
        if name != queue and isinstance(q.capacity, Weighted)
    }
    return {name: n for name, n in held.items() if n}


def _may_run_unlisted(instance: RuntimeInstance, claimed: datetime | None) -> bool:
    """Whether a serving process may run a job claimed at ``claimed`` that its snapshot
    does not list: not when it started after the claim, nor when its snapshot was taken
    after it."""
    return claimed is None or not (
        instance.started_at > claimed
        or (instance.snapshot is not None and instance.last_seen_at > claimed + SNAPSHOT_SLACK)
    )


def overflow_pool(instance: RuntimeInstance) -> int | None:
    """A weighted process's shared overflow: global_max_workers less every queue's
    minimum (None for a hard-reserved process)."""
    snap = instance.snapshot
    if snap is None or snap.global_max_workers is None:
        return None
    weighted = [q.capacity for q in snap.queues.values() if isinstance(q.capacity, Weighted)]
    return snap.global_max_workers - sum(c.min_workers for c in weighted)


def permits_for(instance: RuntimeInstance, queue: str) -> tuple[int, int]:
    """(held, limit) of ``queue``'s permits in one process, from its snapshot.

    Hard-reserved: ``max_workers``. Weighted: its ``min_workers``, the overflow it holds,
    and whatever of the process's overflow pool nobody holds (design record 011): the
    most it could hold without another queue giving any back.
    """
    snap = instance.snapshot
    assert snap is not None
    runtime = snap.queues[queue]
    capacity = runtime.capacity
    if isinstance(capacity, HardReserved):
        return runtime.in_flight, capacity.max_workers
    queues = [q for q in snap.queues.values() if isinstance(q.capacity, Weighted)]
    total = snap.global_max_workers or 0
    unheld = max(0, (overflow_pool(instance) or 0) - sum(_overflow_in_use(q) for q in queues))
    limit = capacity.min_workers + _overflow_in_use(runtime) + unheld
    # Never more than the process can hand out: a minimum raised above what the others
    # leave counts as permits its running handlers do not give back (a review: a free
    # permit promised while all of global_max_workers ran).
    free = max(0, total - sum(q.in_flight for q in queues))
    return runtime.in_flight, min(limit, runtime.in_flight + free)


def _overflow_in_use(runtime: QueueRuntime) -> int:
    """The overflow a weighted queue uses: what it holds, or more when its minimum was
    just lowered under what it runs (its handlers then occupy the shared pool though
    the snapshot's overflow_held says none: explain promised a free permit, a review)."""
    assert isinstance(runtime.capacity, Weighted)
    return max(runtime.capacity.overflow_held, runtime.in_flight - runtime.capacity.min_workers)
