"""The worker process runtime: builds and runs every piece for one ``start()``.

Start order: schema check → upkeep → control (pauses, overrides and limits known before
the first claim) → completer → executor → control refresh loop → listener → dispatchers
→ idle prober → handoff seater → heartbeat → leader → runtime publisher. Shutdown
(:mod:`awa.worker.shutdown`) stops claiming and maintenance first, then the rest, within
its timeout plus a bounded grace; no job this process claimed is left ``running``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Sequence
from concurrent.futures import CancelledError
from datetime import UTC, datetime
from typing import Any

from awa.config import WorkerConfig
from awa.db import migrations, sql
from awa.db.errors import mapped
from awa.db.lane import ConnectionLane
from awa.db.pool import Pool
from awa.maintenance import control_stats, finished_counts, promoter, pruner, rescuer
from awa.maintenance.leader import Leader
from awa.maintenance.vacuum import CHECK_INTERVAL_S, JobsVacuum
from awa.periodic import PeriodicJob
from awa.service import Periodic, Service
from awa.types import RuntimeSnapshot
from awa.worker import heartbeat, memory
from awa.worker.abandon import ABANDON_AFTER_S
from awa.worker.args_budget import ArgsBudget
from awa.worker.attempt import Attempt
from awa.worker.completer import Completer
from awa.worker.control import QueueControl
from awa.worker.control_refresh import ControlRefresher
from awa.worker.dispatcher import Dispatcher
from awa.worker.executor import Census, Executor
from awa.worker.idle_probe import IdleProber
from awa.worker.joblog import JobLog
from awa.worker.listener import Listener
from awa.worker.observe import Fanout, Observer
from awa.worker.permits import build_permits
from awa.worker.rate_limit import TokenBucket
from awa.worker.registry import TaskRegistry
from awa.worker.seats import Seater, channel_for
from awa.worker.shutdown import shut_down
from awa.worker.snapshot import queue_runtime, snapshot_json
from awa.worker.upkeep import Upkeep

logger = logging.getLogger("awa")

PRUNE_INTERVAL_S = 60.0
SYNC_THREADS_CEILING = 256
SNAPSHOT_WAIT_S = 1.0  # how long a reader on another thread waits for a fresh snapshot


class Worker:
    """All the moving parts of one running worker."""

    def __init__(
        self,
        pool: Pool,
        url: str,
        registry: TaskRegistry,
        config: WorkerConfig,
        observers: Sequence[Observer] = (),
        schedules: Sequence[PeriodicJob] = (),
        *,
        listen_url: str | None = None,
    ) -> None:
        self.pool = pool
        self.url = url
        # LISTEN and the leader's connection need a session: a direct URL when the pool's
        # goes through PgBouncer (docs/scaling.md).
        session_url = listen_url or url
        self.config = config
        self.instance_id = str(uuid.uuid4())
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.shutting_down = False
        self.observer = Fanout([JobLog(), *observers])
        self.completer = Completer(
            pool,
            max_backlog=max(4 * config.total_permits, 1_000),
            observer=self.observer,
            synchronous_commit=config.synchronous_commit,
        )
        self.executor = self._build_executor(registry)
        self.upkeep = Upkeep(pool, config, schedules)  # cron, DLQ, aging, progress, callbacks
        self.upkeep.attach(self.executor, self.observer.jobs_rescued)
        # One budget for the whole process: the args of running jobs, every queue's.
        self.args_budget = ArgsBudget(config.max_args_bytes_in_flight)
        self.claim_lane = ConnectionLane()  # the dispatchers' claims (ADR 0048)
        self.dispatchers = self._build_dispatchers()
        # Claims ride on the completer's writes (ADR 0012).
        pools = {d.permits.pool for d in self.dispatchers.values()} - {None}
        self.completer.ride_with(list(self.dispatchers.values()), next(iter(pools), None))
        for dispatcher in self.dispatchers.values():
            dispatcher.ride_on(self.completer.write_pending)
        self.control = ControlRefresher(
            pool,
            {name: d.control for name, d in self.dispatchers.items()},
            self._control_changed,
            config.global_max_workers,
        )
        self.control_service = Periodic(
            "control-refresh", config.override_refresh_ms / 1000, self.control.refresh
        )
        self.idle_prober = IdleProber(pool, self.dispatchers)
        self.seater = Seater(
            pool,
            self.dispatchers,
            channel_for(self.instance_id),
            config.handoff_seats,
            listening=lambda: self.listener.connected,
            listener_pid=lambda: self.listener.backend_pid,
        )
        self.listener = Listener(
            session_url,
            self._on_available,
            self._on_control,
            self._listening,
            handoff=(self.seater.channel, self.seater.on_notice),
            on_disconnect=self.seater.mark_all,
            url_name="listen_url" if listen_url else "the database URL",
        )
        # A failed beat is tried again within a second, not an interval later: the lease
        # limit (ADR 0055) is two intervals by default, and one beat lost to a deadlock or
        # a cancelled statement stopped every handler of a healthy worker (a review).
        # Beats keep a fixed rate: spaced from each one's end, a beat that answered slowly
        # put the next confirmation a whole beat later, and beats slower than half of
        # (limit - interval) stopped handlers the leader would not have rescued.
        interval_s = config.heartbeat_interval_ms / 1000
        self.heartbeat = Periodic(
            "heartbeat", interval_s, self._beat, retry_s=min(1.0, interval_s / 4), fixed_rate=True
        )
        self.publisher = Periodic(
            "runtime-snapshot", config.runtime_snapshot_interval_ms / 1000, self._publish
        )
        self.vacuum = JobsVacuum(pool, config.vacuum_dead_rows)
        self.control_stats = control_stats.ControlStats(pool)
        self.leader = Leader(
            session_url,
            self._maintenance_services(),
            config.leader_election_interval_ms / 1000,
            holder=self.instance_id,
            lease_s=config.leader_lease_ms / 1000,
            on_change=self.publisher.kick,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self.latest = self._build_snapshot()

    def _build_executor(self, registry: TaskRegistry) -> Executor:
        config, pool = self.config, self.pool
        # Threads start on demand and permits bound how many run, so a generous ceiling
        # costs nothing and leaves room for max_workers raised live (CONTRACT §10).
        threads = max(config.total_permits, SYNC_THREADS_CEILING)
        executor = Executor(registry, self.completer, threads, self.observer)
        # A claim that waited half the staleness window before its handler starts may
        # have been rescued meanwhile (a frozen process): it is re-checked first.
        executor.revalidate = lambda keys: heartbeat.still_running(
            pool, keys, config.synchronous_commit
        )
        executor.revalidate_after_s = config.heartbeat_staleness_ms / 2000
        # A handler whose lease no heartbeat confirmed for this long is stopped before its
        # job can be rescued: it never runs beside the job's next run (a network partition).
        executor.lease_limit_s = heartbeat.unconfirmed_limit_s(
            config.heartbeat_interval_ms, config.heartbeat_staleness_ms
        )
        # Handlers abandoned at a time (ADR 0016): the permits, not the thread ceiling.
        executor.abandoned.limit = max(config.total_permits, 1)
        return executor

    def _build_dispatchers(self) -> dict[str, Dispatcher]:
        """One dispatcher per queue, each with its permits, control and rate limiter."""
        config = self.config
        permits = build_permits(
            [(q.name, q.max_workers, q.min_workers, q.weight) for q in config.queues],
            config.global_max_workers,
        )
        dispatchers: dict[str, Dispatcher] = {}
        for q in config.queues:
            bucket = TokenBucket(q.rate_limit[0], q.rate_limit[1]) if q.rate_limit else None
            control = QueueControl(
                q, bucket, weighted=config.weighted, refresh_ms=config.override_refresh_ms
            )
            dispatchers[q.name] = Dispatcher(
                q.name,
                self.pool,
                permits[q.name],
                control,
                self.executor,
                self.observer,
                args_budget=self.args_budget,
                instance_id=self.instance_id,
                claim_lane=self.claim_lane,
            )
        return dispatchers

    def _maintenance_services(self) -> list[Periodic]:
        c = self.config
        # Past a job's deadline, its own worker stops the handler, abandons one that runs
        # on ABANDON_AFTER_S later and writes its outcome (ADR 0016): the leader waits for
        # that first. With a grace of one heartbeat interval only, short beats had the
        # leader retry the job while its worker still waited for the handler (a review:
        # 200 ms beats, a plain def's job run again after 1.2 s beside the first run).
        grace_ms = c.heartbeat_interval_ms + int(ABANDON_AFTER_S * 1000)
        return [
            Periodic(
                "promote",
                c.promote_interval_ms / 1000,
                lambda: promoter.promote_due(self.pool, self.leader.epoch),
            ),
            Periodic(
                "rescue-heartbeat",
                c.heartbeat_rescue_interval_ms / 1000,
                lambda: self._report_rescued(
                    "heartbeat",
                    rescuer.rescue_stale_heartbeats(
                        self.pool, c.heartbeat_staleness_ms, self.leader.epoch
                    ),
                ),
            ),
            Periodic(
                "rescue-deadline",
                c.deadline_rescue_interval_ms / 1000,
                lambda: self._report_rescued(
                    "deadline", rescuer.rescue_past_deadline(self.pool, grace_ms, self.leader.epoch)
                ),
            ),
            Periodic("prune", PRUNE_INTERVAL_S, self._prune),
            Periodic("vacuum", CHECK_INTERVAL_S, self.vacuum.tick),
            Periodic("control-stats", control_stats.CHECK_INTERVAL_S, self.control_stats.tick),
            Periodic(
                "fold-finished-counts",
                finished_counts.FOLD_INTERVAL_S,
                lambda: finished_counts.fold(self.pool),
            ),
            *self.upkeep.maintenance(lambda: self.leader.epoch),
        ]

    async def _report_rescued(self, reason: str, work: Awaitable[rescuer.Rescued]) -> None:
        rows = await work
        if rows:
            self.observer.jobs_rescued(reason, rows)

    async def _prune(self) -> None:
        c = self.config
        epoch = self.leader.epoch
        await pruner.prune_finalized(
            self.pool, c.completed_retention_ms, c.failed_retention_ms, epoch
        )
        await pruner.prune_runtime_instances(self.pool, epoch)
        await pruner.prune_full_rate_buckets(self.pool, epoch)
        await pruner.prune_lapsed_seats(self.pool)
        await self.upkeep.prune()

    # -- notifications ---------------------------------------------------------------

    def _on_available(self, queue: str) -> None:
        dispatcher = self.dispatchers.get(queue)
        if dispatcher is not None:
            dispatcher.wake_available()

    def _on_control(self, message: dict[str, Any]) -> None:
        if "cancel" in message:
            # Any role that can connect may NOTIFY: act only on a notice naming the
            # attempt's exact lease, as awa's own cancel statements do.
            job_id, lease = message.get("cancel"), message.get("run_lease")
            if isinstance(job_id, int) and isinstance(lease, int):
                self.executor.cancel(job_id, "cancelled", lease)
        resumed = message.get("resumed")  # a handler here may wait for this job's callback
        if isinstance(resumed, int):
            self.upkeep.attempt_services.waiters.wake(resumed)
        queue = message.get("queue_meta")
        if isinstance(queue, str) and queue in self.dispatchers:
            self.control_service.kick()
        freed = message.get("freed")
        if isinstance(freed, str) and freed in self.dispatchers:
            self.dispatchers[freed].wake_freed()

    def _control_changed(self, queue: str, control: QueueControl) -> None:
        self._resize_permits(queue, control)
        self.dispatchers[queue].control_changed()
        self.seater.refresh(queue)
        self.observer.override_changed(queue, control.effective_values(), dict(control.ignored))
        self.publisher.kick()  # `overrides show` reads the published effective values

    def _resize_permits(self, queue: str, control: QueueControl) -> None:
        """Live concurrency (CONTRACT §10): the permits follow the effective values."""
        permits = self.dispatchers[queue].permits
        if permits.pool is None:
            permits.resize(control.max_workers)
            # A sync handler needs a thread for each permit: max_workers raised past the
            # threads sized at start would claim jobs that wait for one.
            total = sum(d.control.max_workers for d in self.dispatchers.values())
            self.executor.resize(max(total, SYNC_THREADS_CEILING), abandon_limit=max(total, 1))
            return
        permits.resize(control.min_workers, control.weight)
        assert self.config.global_max_workers is not None
        minimums = sum(d.control.min_workers for d in self.dispatchers.values())
        permits.pool.resize(self.config.global_max_workers - minimums)

    def _listening(self) -> None:
        # Notices sent while nothing listened (before the first LISTEN, or while the
        # connection was down) are lost: look for the work and the control changes they
        # would have announced.
        for dispatcher in self.dispatchers.values():
            dispatcher.recheck()
        self.seater.resync()
        self.control_service.kick()

    # -- periodic work ---------------------------------------------------------------

    async def _beat(self) -> None:
        await heartbeat.beat(
            self.pool, self.executor, self.completer, self.config.synchronous_commit
        )

    async def _publish(self) -> None:
        async with self.pool.connection() as conn:
            # Built once the connection is here: readers take a claim older than the row's
            # last_seen_at (less a second) and not in the snapshot for a job no process runs,
            # and a snapshot built before a wait for a busy pool missed the claims made
            # during it (explain called a live worker's job unattended, a review).
            snap = self.snapshot()
            await conn.execute(
                sql.RUNTIME_INSTANCE_UPSERT,
                {
                    "instance_id": self.instance_id,
                    "hostname": self.hostname,
                    "pid": self.pid,
                    "is_leader": self.leader.is_leader,
                    "snapshot": json.dumps(snapshot_json(snap)),
                },
            )

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Check the schema, then start every service."""
        memory.return_big_blocks_when_freed()
        self._loop = asyncio.get_running_loop()
        async with self.pool.connection() as conn:
            with mapped():
                await migrations.check_schema(conn)
                await finished_counts.check_grants(conn)
        with mapped():  # a refusal of the schedules' or DLQ flags' writes: an awa error
            await self.upkeep.prepare()
        await self.control.refresh()  # dispatchers start knowing pauses, overrides, limits
        await self.completer.prepare()
        self.completer.start()
        self.executor.start()
        self.control_service.start()
        self.listener.start()
        for dispatcher in self.dispatchers.values():
            dispatcher.start()
        self.idle_prober.start()
        self.seater.start()
        self.heartbeat.start()
        self.leader.start()
        self.publisher.start()
        logger.info(
            "worker %s started: %s mode, queues %s",
            self.instance_id,
            "weighted" if self.config.weighted else "hard-reserved",
            ", ".join(self.dispatchers),
            extra={"event": "worker_started", "instance_id": self.instance_id},
        )
        self.observer.worker_started(self)

    async def shutdown(self, timeout_ms: int) -> list[Attempt]:
        """Stop claiming, give handlers ``timeout_ms`` to finish, fence the rest
        (:mod:`awa.worker.shutdown`); returns the attempts whose handlers were abandoned."""
        if self.shutting_down:
            return []
        self.shutting_down = True
        abandoned = await shut_down(self, timeout_ms)
        self.observer.worker_stopped(self)
        logger.info(
            "worker %s stopped",
            self.instance_id,
            extra={"event": "worker_stopped", "instance_id": self.instance_id},
        )
        return abandoned

    # -- the read model --------------------------------------------------------------

    def services(self) -> list[Service]:
        """This process's own background services (the leader's are the leader's)."""
        return [
            self.completer,
            *([self.completer.durable] if self.completer.durable is not None else []),
            self.executor.deadlines,
            self.listener,
            *self.dispatchers.values(),
            self.seater,
            self.heartbeat,
            self.control_service,
            self.idle_prober,
            self.upkeep.progress_flusher,
            self.leader,
            self.publisher,
        ]

    def snapshot(self) -> RuntimeSnapshot:
        """The worker's state now: what every reader (health, gauges, tests) consumes.

        Built on the worker's event loop, where that state lives. A reader on another
        thread (a metrics scrape, the blocking ``Client``) gets one built there, or —
        when the loop does not answer within ``SNAPSHOT_WAIT_S`` or has stopped — the
        last one built (:attr:`latest`).
        """
        loop = self._loop
        if loop is None or loop.is_closed() or _running_loop() is loop:
            return self._build_snapshot()
        try:
            future = asyncio.run_coroutine_threadsafe(self._build_async(), loop)
        except RuntimeError:  # the loop is closing
            return self.latest
        try:
            return future.result(SNAPSHOT_WAIT_S)
        except (TimeoutError, CancelledError):
            future.cancel()
            return self.latest

    async def _build_async(self) -> RuntimeSnapshot:
        return self._build_snapshot()

    def _build_snapshot(self) -> RuntimeSnapshot:
        census, parked = self.executor.census(), self.seater.parked()
        self.latest = RuntimeSnapshot(
            instance_id=self.instance_id,
            hostname=self.hostname,
            pid=self.pid,
            started_at=self.started_at,
            leader=self.leader.is_leader,
            mode="weighted" if self.config.weighted else "hard_reserved",
            global_max_workers=self.config.global_max_workers,
            queues={
                name: queue_runtime(d, census.get(name, Census()), parked.get(name, 0))
                for name, d in self.dispatchers.items()
            },
            shutting_down=self.shutting_down,
            services={s.name: s.alive for s in self.services()},
            running_job_ids=tuple(self.executor.attempts),
            heartbeat_staleness_ms=self.config.heartbeat_staleness_ms,
        )
        return self.latest


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
