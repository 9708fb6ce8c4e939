"""Keeps every queue's :class:`~awa.worker.control.QueueControl` current (ADR 0011).

One statement reads the control state of ALL this worker's queues (``queue_control_list``)
every ``override_refresh_ms``, and at once when an ``awa_control`` notice says a queue's
row changed (the worker runs :meth:`ControlRefresher.refresh` as a periodic service and
kicks it on a notice). It runs beside the dispatchers, not inside their loops, so an
override lands within one cadence however long a dispatcher keeps draining a backlog
(design record 038's incident case: a hot queue that never goes idle). Whenever what a
queue's dispatcher uses changes, that dispatcher is told at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from awa.db import sql
from awa.worker.control import QueueControl, minimums_refusal

Changed = Callable[[str, QueueControl], None]


class ControlRefresher:
    """Reads the control rows of a worker's queues and applies them."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        controls: Mapping[str, QueueControl],
        on_change: Changed,
        global_max_workers: int | None = None,
    ) -> None:
        self._pool = pool
        self._controls = controls
        self._global_max_workers = global_max_workers
        self._queues = list(controls)
        self._on_change = on_change
        self.refreshes = 0

    async def refresh(self) -> None:
        """Read every queue's control row now and apply it; tell whoever must know."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(sql.QUEUE_CONTROL_LIST, {"queues": self._queues})
            rows = {row["queue"]: row for row in await cur.fetchall()}
        self.refreshes += 1
        refused = minimums_refusal(self._controls.values(), rows, self._global_max_workers)
        for queue, control in self._controls.items():
            before = control.state()
            control.apply(rows.get(queue), minimums_refused=refused.get(queue))
            if control.state() != before:
                self._on_change(queue, control)
