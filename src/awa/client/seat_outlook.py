"""Whether a single insert looks for an idle worker's handoff seat (ADR 0049).

Looking costs the server 10–14 µs per insert (the seat probe of ``job_insert.sql``, a
subplan over ``awa.handoff_seats``) and finds nothing while every worker of the queue is
busy, which is when a producer inserts fastest. So once ``MISSES`` looks in a row found
no seat for a queue, the producer rests from looking for ``REST_S``: its inserts of that
queue meanwhile wake the queue on ``awa_available``, as inserts without a seat always do
(the job is claimed one round trip later). After a rest it looks once more; a look that
finds a seat ends the count.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

MISSES = 8
REST_S = 0.05
# Queues remembered at most: a producer inserting into ever-new queues (one per tenant)
# kept an entry for each for good. Past this many, the least recently missed is
# forgotten (it pays up to MISSES looks again); a producer inserting into more queues
# than this in turn would look every time, as before the outlook existed.
MAX_QUEUES = 10_000


class SeatOutlook:
    """Per queue: recent looks that found no seat, and the end of the current rest."""

    __slots__ = ("_clock", "_misses", "_rest_until")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # least recently missed first (OrderedDict: a plain dict's deletions at the front
        # made each eviction scan past them, ~10x the cost of a look)
        self._misses: OrderedDict[str, int] = OrderedDict()
        self._rest_until: dict[str, float] = {}

    def worth_looking(self, queue: str) -> bool:
        """False while ``queue``'s looks rest."""
        until = self._rest_until.get(queue)
        return until is None or self._clock() >= until

    def looked(self, queue: str, *, found: bool) -> None:
        """Record one look for a seat of ``queue`` and whether it found one."""
        if found:
            self._misses.pop(queue, None)
            self._rest_until.pop(queue, None)
            return
        misses = self._misses.get(queue, 0) + 1
        self._misses[queue] = misses
        self._misses.move_to_end(queue)  # the most recently missed last
        if len(self._misses) > MAX_QUEUES:
            oldest, _ = self._misses.popitem(last=False)
            self._rest_until.pop(oldest, None)
        if misses >= MISSES:
            self._rest_until[queue] = self._clock() + REST_S
