"""The batch-operation methods of :class:`~awa.client.async_client.AsyncClient` (a mixin,
like :mod:`awa.client.features`); each is a documented entry into :mod:`awa.client.batch`.
The sync ``Client`` exposes each through one ``_blocking(...)`` line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from awa import validate
from awa.client import batch
from awa.client.batch import BatchOperation, BatchPreview, Progress
from awa.errors import ValidationError
from awa.types import JobState

T = TypeVar("T")


class BatchMethods:
    """Preview, apply, run, cancel and list batch operations (mixed into AsyncClient)."""

    _get_pool: Callable[[], Awaitable[AsyncConnectionPool]]  # provided by AsyncClient
    # A pooled connection whose pool timeout is a DatabaseError (provided by AsyncClient).
    _connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]]

    if TYPE_CHECKING:  # provided by AsyncClient

        async def _read(self, op: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
            """Run the read-only ``op``, again on another connection if its own dies."""

    async def preview_batch(
        self,
        op: batch.BatchOp,
        *,
        kind: str | None = None,
        queue: str | None = None,
        state: JobState | str | None = None,
        ids: Sequence[int] | None = None,
        sample: int = 20,
    ) -> BatchPreview:
        """How many waiting jobs ``op`` (``awa.MoveQueue(queue)``, ``awa.SetPriority(n)``)
        would change now, and the first ``sample`` by id; nothing is written."""
        return await self._read(
            lambda conn: batch.preview(
                conn, op, kind=kind, queue=queue, state=state, ids=ids, sample=sample
            )
        )

    async def apply_batch(
        self,
        op: batch.BatchOp,
        *,
        kind: str | None = None,
        queue: str | None = None,
        state: JobState | str | None = None,
        ids: Sequence[int] | None = None,
        chunk_size: int = 1_000,
        submitted_by: str | None = None,
        allow_all: bool = False,
        wait: bool = True,
        on_progress: Progress | None = None,
    ) -> BatchOperation:
        """Apply ``op`` to the waiting jobs matching the filter (``state`` one of
        available, scheduled, retryable; filters combine), ``chunk_size`` jobs per
        transaction. The jobs are fixed when it is submitted.

        ``wait=True`` runs it to the end here, calling ``on_progress(operation)`` after
        each chunk; ``wait=False`` returns the pending operation for a worker's maintenance
        leader (or ``run_batch``) to carry out. Cancel it with ``cancel_batch``. With no
        filter at all it refuses unless ``allow_all=True``.
        """
        wait = validate.flag("wait", wait)  # before anything is submitted
        pool = await self._get_pool()
        async with self._connection() as conn:
            operation = await batch.submit(
                conn, op, kind=kind, queue=queue, state=state, ids=ids,
                chunk_size=chunk_size, submitted_by=submitted_by, allow_all=allow_all,
            )  # fmt: skip
        if not wait:
            return operation
        return await batch.run(pool, operation.id, on_progress=on_progress)

    async def run_batch(
        self, operation_id: int, *, on_progress: Progress | None = None
    ) -> BatchOperation:
        """Carry an open operation on to its end from here (after its caller went away);
        returns it as it ended. A completed one is returned as it is; a cancelled one is
        a ValidationError (a cancel is final: its job list is gone)."""
        current = await self.get_batch(operation_id)
        if current.state == "cancelled":
            raise ValidationError(
                "operation_id",
                f"operation {operation_id} was cancelled, which is final: apply a new one",
            )
        return await batch.run(await self._get_pool(), operation_id, on_progress=on_progress)

    async def cancel_batch(self, operation_id: int) -> BatchOperation:
        """End an operation after the chunk in flight, for good (changed jobs stay
        changed; the jobs it had not reached are forgotten)."""
        async with self._connection() as conn:
            return await batch.cancel(conn, operation_id)

    async def get_batch(self, operation_id: int) -> BatchOperation:
        """One operation and its progress (BatchNotFound when there is none)."""
        return await self._read(lambda conn: batch.get(conn, operation_id))

    async def list_batches(
        self, *, state: str | None = None, limit: int = 50
    ) -> list[BatchOperation]:
        """Operations newest first, optionally of one state (pending, running,
        completed, cancelled)."""
        return await self._read(lambda conn: batch.list_operations(conn, state=state, limit=limit))
