"""The methods of :class:`~awa.client.async_client.AsyncClient` for a job's life beyond
one run: periodic schedules, the dead letter queue (parking after failure) and external
callbacks (completion by another system). Registering periodic jobs and lifecycle hooks
(``periodic``, ``on_event``) lives in :mod:`awa.client.registering`, shared with the
sync ``Client``.

A mixin so the core client module stays readable; every method is a thin, documented
entry point into :mod:`awa.client.cron`, :mod:`awa.client.dlq`,
:mod:`awa.client.callbacks` and :mod:`awa.hooks`. The sync ``Client`` exposes each async
method through one ``_blocking(...)`` line, like the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg import AsyncConnection
from psycopg import errors as pg
from psycopg_pool import AsyncConnectionPool

from awa.client import callbacks, cron, dlq
from awa.client.dlq import DeadLetter
from awa.client.insert import InsertSpec
from awa.errors import DatabaseError, ScheduleNotFound, ValidationError
from awa.hooks import (
    Hooks,
)
from awa.periodic import CronSchedule, PeriodicJob
from awa.types import Job, StoredJob
from awa.worker.observe import Observer
from awa.worker.registry import TaskRegistry

T = TypeVar("T")

# Two bulk DLQ statements on shared entries (or one and the leader's pruner) can visit
# them in different orders, and PostgreSQL then ends one with a deadlock. A row lock
# taken in id order first would need UPDATE on awa.dlq, which the app role does not
# have (docs/security.md); each statement is atomic, so the one ended runs again.
_DEADLOCK_TRIES = 3


class JobLifecycle:
    """Periodic jobs, DLQ, external callbacks and hooks (mixed into AsyncClient)."""

    _periodic: list[PeriodicJob]
    _observers: list[Observer]
    _hooks: Hooks | None
    _after_insert: Callable[[Job[Any]], Awaitable[Job[Any]]] | None
    _spec: Callable[..., InsertSpec]  # provided by AsyncClient
    _get_pool: Callable[[], Awaitable[AsyncConnectionPool]]  # provided by AsyncClient
    # A pooled connection whose pool timeout is a DatabaseError (provided by AsyncClient).
    _connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]]
    _worker: Any  # the running worker, if any
    registry: TaskRegistry  # provided by AsyncClient

    if TYPE_CHECKING:  # provided by AsyncClient

        async def _read(self, op: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
            """Run the read-only ``op``, again on another connection if its own dies."""

    async def _bulk_dlq(self, op: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        """Run the one-statement DLQ write ``op``, again when a deadlock ended it."""
        for _ in range(_DEADLOCK_TRIES - 1):
            try:
                async with self._connection() as conn:
                    return await op(conn)
            except DatabaseError as exc:
                if not isinstance(exc.__cause__, pg.DeadlockDetected):
                    raise
        async with self._connection() as conn:  # the last try's deadlock is the caller's
            return await op(conn)

    def _before_start(self, what: str) -> None:
        if self._worker is not None:
            raise ValidationError(
                what, "register before start(): the running worker does not see it"
            )

    # -- periodic jobs (periodic() itself: awa.client.registering) --------------------

    async def list_cron_schedules(self) -> list[CronSchedule]:
        """Every stored schedule with its pause state, last and next fire."""
        return await self._read(cron.list_schedules)

    async def pause_cron(self, name: str) -> CronSchedule:
        """Stop firing schedule ``name`` (ScheduleNotFound when there is none)."""
        async with self._connection() as conn:
            return await cron.pause(conn, name)

    async def resume_cron(self, name: str) -> CronSchedule:
        """Fire schedule ``name`` again from now on; fires missed while paused are skipped."""
        async with self._connection() as conn:
            return await cron.resume(conn, name)

    async def trigger_cron(self, name: str) -> StoredJob:
        """Enqueue one job of schedule ``name`` now, outside its timetable."""
        try:
            async with self._connection() as conn:
                return await cron.trigger(conn, name)
        except ScheduleNotFound:
            if self._worker is None and any(job.name == name for job in self._periodic):
                raise ScheduleNotFound(
                    name, "registered on this client, but schedules are stored by start()"
                ) from None
            raise

    async def remove_cron(self, name: str) -> None:
        """Delete schedule ``name`` (a worker that registers it re-creates it at start)."""
        async with self._connection() as conn:
            await cron.remove(conn, name)

    # -- dead letter queue -----------------------------------------------------------

    async def list_dlq(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> list[DeadLetter]:
        """Dead-lettered jobs, most recently moved first (``older_than``: seconds or a
        timedelta since they were moved). Page with ``before=page[-1].cursor``."""
        return await self._read(
            lambda conn: dlq.list_dead(
                conn, kind=kind, queue=queue, older_than=older_than, limit=limit, before=before
            )
        )

    async def get_dlq_job(self, job_id: int) -> DeadLetter:
        """The dead-lettered job with ``job_id`` (JobNotFound when it is not in the DLQ)."""
        return await self._read(lambda conn: dlq.get(conn, job_id))

    async def dlq_depth(self, queue: str | None = None) -> int:
        """How many jobs are in the dead letter queue (of ``queue``, or in all)."""
        return sum((await self._read(lambda conn: dlq.depth(conn, queue))).values())

    async def dlq_depth_by_queue(self) -> dict[str, int]:
        """Dead-lettered jobs per queue (queues with none are absent)."""
        return await self._read(dlq.depth)

    async def move_failed_to_dlq(
        self,
        ids: int | Sequence[int] | None = None,
        *,
        kind: str | None = None,
        queue: str | None = None,
        reason: str | None = None,
        allow_all: bool = False,
    ) -> int:
        """Move ``failed`` jobs — one id, several, or by ``kind``/``queue`` — from the jobs
        table into the dead letter queue, on any queue; returns how many moved. ``reason``
        defaults to each job's last error. With no filter at all, refuses unless
        ``allow_all=True``."""
        return await self._bulk_dlq(
            lambda conn: dlq.move_failed(
                conn, ids, kind=kind, queue=queue, reason=reason, allow_all=allow_all
            )
        )

    async def retry_from_dlq(
        self,
        ids: int | Sequence[int] | None = None,
        *,
        kind: str | None = None,
        queue: str | None = None,
        older_than: timedelta | float | None = None,
        allow_all: bool = False,
    ) -> list[StoredJob]:
        """Move matching dead-lettered jobs — one id, several, or by ``kind``/``queue``/
        ``older_than`` — back to ``available`` with a fresh attempt budget. With no filter
        at all, refuses unless ``allow_all=True``."""
        return await self._bulk_dlq(
            lambda conn: dlq.retry(
                conn, ids, kind=kind, queue=queue, older_than=older_than, allow_all=allow_all
            )
        )

    async def _retry_from_dlq_count(
        self,
        ids: int | Sequence[int] | None = None,
        *,
        kind: str | None = None,
        queue: str | None = None,
        older_than: timedelta | float | None = None,
        allow_all: bool = False,
    ) -> int:
        """:meth:`retry_from_dlq`, returning how many (for the CLI and the dashboard,
        which show a count: a job built for each of 200 000 took 576 MB, a review)."""
        return await self._bulk_dlq(
            lambda conn: dlq.retry_count(
                conn, ids, kind=kind, queue=queue, older_than=older_than, allow_all=allow_all
            )
        )

    async def purge_dlq(
        self,
        ids: int | Sequence[int] | None = None,
        *,
        kind: str | None = None,
        queue: str | None = None,
        older_than: timedelta | float | None = None,
        allow_all: bool = False,
    ) -> int:
        """Delete matching dead-lettered jobs (one id, several, or by ``kind``/``queue``/
        ``older_than``); returns how many. With no filter at all, refuses unless
        ``allow_all=True``."""
        return await self._bulk_dlq(
            lambda conn: dlq.purge(
                conn, ids, kind=kind, queue=queue, older_than=older_than, allow_all=allow_all
            )
        )

    # -- external callbacks ----------------------------------------------------------

    async def complete_external(self, callback_id: str, payload: Any = None) -> StoredJob:
        """Complete the job waiting for ``callback_id`` (payload kept in metadata as
        ``callback_payload``). CallbackNotFound when no job waits for it."""
        async with self._connection() as conn:
            return await callbacks.complete(conn, callback_id, payload)

    async def fail_external(self, callback_id: str, error: str) -> StoredJob:
        """Fail the job waiting for ``callback_id`` now, recording ``error``."""
        async with self._connection() as conn:
            return await callbacks.fail(conn, callback_id, error)

    async def resume_external(self, callback_id: str, payload: Any = None) -> StoredJob:
        """Answer ``callback_id`` and let its job go on: a handler waiting in
        ``job.wait_for_callback(callback_id)`` returns ``payload`` and continues the same
        attempt (the job stays ``running``); a job parked by returning
        ``WaitForCallback`` becomes ``available`` and runs again with ``payload`` in
        ``metadata.callback_payload``. CallbackNotFound when no job waits for the id."""
        async with self._connection() as conn:
            return await callbacks.resume(conn, callback_id, payload)

    async def retry_external(self, callback_id: str) -> StoredJob:
        """Make the job waiting for ``callback_id`` available to run again now."""
        async with self._connection() as conn:
            return await callbacks.retry(conn, callback_id)

    async def heartbeat_callback(
        self, callback_id: str, timeout_seconds: float = 3600
    ) -> StoredJob:
        """Push the callback's timeout to ``timeout_seconds`` from now."""
        async with self._connection() as conn:
            return await callbacks.heartbeat(conn, callback_id, timeout_seconds)
