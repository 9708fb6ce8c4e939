"""The fleet methods of :class:`~awa.client.async_client.AsyncClient` (CONTRACT §8–§9):
limits that hold across every worker process and host, and the fleet-wide weighted pool.

A mixin so the core client module stays readable; each method validates, then runs the
statements in :mod:`awa.client.fleet`. The sync ``Client`` exposes each through one
``_blocking(...)`` line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from psycopg import AsyncConnection

from awa.client import fleet
from awa.types import FleetPool, PoolMember, QueueLimits, QueueLimitsStatus

T = TypeVar("T")


class _Connects(Protocol):
    def _connection(self) -> AbstractAsyncContextManager[AsyncConnection[Any]]: ...

    async def _read(self, op: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T: ...


class FleetControl:
    """Fleet limits and the fleet pool (mixed into AsyncClient)."""

    async def set_queue_limits(
        self: _Connects,
        queue: str,
        *,
        concurrency: int | None = None,
        rate_limit: float | None = None,
        burst: int | None = None,
        partition_by: str | None = None,
    ) -> QueueLimits | None:
        """Replace ``queue``'s fleet-wide limits (whole state; None: no limit of that kind).

        ``concurrency``: at no instant more than this many of the queue's jobs run across
        the fleet. ``rate_limit`` (jobs/s) with ``burst`` (default ``ceil(rate_limit)``):
        starts in any window of T seconds stay within ``rate_limit × T + burst``.
        ``partition_by``: a top-level args key; both limits then apply per value of it,
        and a key at its limit never delays the others. Every worker applies the change
        within one refresh cadence (at once on the notice). Nothing set means unlimited
        (the same as :meth:`clear_queue_limits`; returns None). Invalid values raise
        ValidationError naming the field and write nothing.
        """
        params = fleet.limit_params(queue, concurrency, rate_limit, burst, partition_by)
        async with self._connection() as conn:
            return await fleet.set_queue_limits(conn, params)

    async def clear_queue_limits(self: _Connects, queue: str) -> QueueLimits | None:
        """Remove ``queue``'s fleet limits; returns what was stored (None: nothing was)."""
        async with self._connection() as conn:
            return await fleet.clear_queue_limits(conn, queue)

    async def queue_limits(self: _Connects, queue: str) -> QueueLimits | None:
        """The fleet limits stored for ``queue`` (None: unlimited)."""
        return await self._read(lambda conn: fleet.queue_limits(conn, queue))

    async def queue_limits_status(
        self: _Connects, queue: str | None = None
    ) -> list[QueueLimitsStatus]:
        """Every limited queue (or ``queue``) with the fleet's running jobs now, its
        busiest partitions and the tokens left in its bucket."""
        return await self._read(lambda conn: fleet.queue_limits_status(conn, queue))

    async def set_fleet_pool(
        self: _Connects, total: int, queues: Mapping[str, PoolMember]
    ) -> FleetPool:
        """Replace the fleet-wide weighted pool (whole state).

        Across every process and host the member queues never run more than ``total``
        jobs at once; a member with waiting jobs can reach its ``min_workers`` at once;
        the rest is shared by weight among the members with waiting jobs; one loaded
        member alone can use ``total`` minus the others' minimums. Σ min_workers >
        ``total`` raises MinWorkersExceedGlobal and writes nothing.
        """
        params = fleet.pool_params(total, queues)
        async with self._connection() as conn:
            return await fleet.set_fleet_pool(conn, params)

    async def clear_fleet_pool(self: _Connects) -> bool:
        """Remove the fleet pool; True when there was one."""
        async with self._connection() as conn:
            return await fleet.clear_fleet_pool(conn)

    async def fleet_pool(self: _Connects) -> FleetPool | None:
        """The fleet pool with each member's running jobs now (None: no pool)."""
        return await self._read(fleet.fleet_pool)


__all__ = ["FleetControl"]
