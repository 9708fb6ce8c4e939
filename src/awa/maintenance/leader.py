"""Leader election: one worker in the fleet runs maintenance, under a lease (ADR 0019).

The leader holds the one row of ``awa.leader_lease`` and renews it every
``election_interval_s`` on a dedicated connection; the lease lasts ``lease_s`` of the
server's clock. A leader that stops renewing — frozen (SIGSTOP, a stalled VM),
partitioned, or its loop blocked — loses the lease when it expires, and the next
campaigner takes it. A leader that crashed loses it at once: its connection's backend is
gone. Every acquisition bumps the lease's *epoch*, and every maintenance statement
carries the epoch its leader was elected with and does nothing once that epoch is no
longer the lease's (``awa.leader_holds``): a former leader that wakes up cannot act on
its stale leadership, exactly as a stale attempt cannot complete a job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import psycopg
from psycopg import AsyncConnection

from awa.db import forking, sql
from awa.db.connection import behind_pooler, iso_dates, keepalives
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService, Periodic

logger = logging.getLogger("awa")

NOT_LEADING = -1  # the epoch a fenced statement gets when this worker does not lead


class Leader(LoopService):
    """Campaigns for the lease; runs ``services`` while it holds it.

    Stopping ends the campaign and the leader's services, and gives the lease up.
    """

    def __init__(
        self,
        url: str,
        services: Sequence[Periodic],
        election_interval_s: float,
        *,
        holder: str,
        lease_s: float,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        super().__init__("leader")
        # Told when this worker becomes or stops being the leader: its published snapshot
        # says who leads, and said it 10 s late (awa runtime list showed no leader while
        # the log said "became maintenance leader"; a review).
        self._on_change = on_change
        self._url = url
        self._services = list(services)
        self._interval = election_interval_s
        self._holder = holder
        self._lease_ms = round(lease_s * 1000)
        self.epoch = NOT_LEADING
        self._watched = True  # the lease connection has a backend of its own to watch
        self.elections = 0

    @property
    def is_leader(self) -> bool:
        """True while this worker holds the lease (as far as it last knew)."""
        return self.epoch != NOT_LEADING

    async def _after_stop(self) -> None:
        await self._step_down()

    async def _step_down(self) -> None:
        was_leading, self.epoch = self.is_leader, NOT_LEADING
        for service in self._services:
            await service.stop()
        if was_leading:
            logger.info("maintenance leadership released", extra={"event": "leader_released"})
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    async def _run(self) -> None:
        while not self.stopping:
            try:
                # Never prepared: through a pooler each statement may meet another session.
                connect = AsyncConnection.connect(
                    self._url, autocommit=True, prepare_threshold=None, **keepalives(self._url)
                )
                async with forking.track(await connect) as conn:
                    await iso_dates(conn)
                    self._watched = not await behind_pooler(conn)
                    try:
                        await self._campaign(conn)
                    finally:
                        await self._give_up(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "leader election: %s", fault(exc), extra={"event": "leader_error"},
                    exc_info=traceback_unless_expected(exc),
                )  # fmt: skip
            await self._step_down()
            await asyncio.sleep(self._interval)

    async def _give_up(self, conn: AsyncConnection[tuple[object, ...]]) -> None:
        """On the way out (stop, or a failed renewal): stop the services, then expire our
        lease so that another worker takes over at once. Best effort: a lease that cannot
        be released expires, or is freed by its holder's backend ending."""
        epoch = self.epoch
        await self._step_down()
        if epoch == NOT_LEADING or conn.closed:
            return
        try:
            await conn.execute(sql.LEADER_LEASE_RELEASE, {"epoch": epoch, "holder": self._holder})
        except psycopg.Error as exc:
            logger.debug("leader: could not release the lease: %s", exc)

    async def _campaign(self, conn: AsyncConnection[tuple[object, ...]]) -> None:
        while True:
            epoch = await self._acquire(conn)
            if epoch is None:
                await asyncio.sleep(self._interval)
                continue
            self.epoch = epoch
            self.elections += 1
            logger.info(
                "became maintenance leader (epoch %d)", epoch,
                extra={"event": "leader_elected", "epoch": epoch},
            )  # fmt: skip
            for service in self._services:
                service.start()
            self._changed()
            await self._hold(conn, epoch)
            logger.warning(
                "maintenance lease lost (epoch %d): another worker leads; this one did not "
                "renew it in time (frozen, blocked or partitioned) or its lease "
                "connection's server process ended", epoch,
                extra={"event": "leader_lost", "epoch": epoch},
            )  # fmt: skip
            await self._step_down()

    async def _acquire(self, conn: AsyncConnection[tuple[object, ...]]) -> int | None:
        cur = await conn.execute(
            sql.LEADER_LEASE_ACQUIRE,
            {"holder": self._holder, "lease_ms": self._lease_ms, "watched": self._watched},
        )
        row = await cur.fetchone()
        if row is None:
            return None
        epoch = row[0]
        assert isinstance(epoch, int)  # bigint
        return epoch

    async def _hold(self, conn: AsyncConnection[tuple[object, ...]], epoch: int) -> None:
        """Renew the lease every interval; returns when it was taken by another worker.
        A failed renewal (the connection is gone) raises, and the caller steps down."""
        params = {
            "epoch": epoch,
            "holder": self._holder,
            "lease_ms": self._lease_ms,
            "watched": self._watched,
        }
        while True:
            await asyncio.sleep(self._interval)
            cur = await conn.execute(sql.LEADER_LEASE_RENEW, params)
            if await cur.fetchone() is None:
                return
