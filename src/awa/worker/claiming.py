"""What a claim needs on both of its paths (ADR 0012): a dispatcher's own claim, and a
claim riding on the completer's next write of outcomes.

A :class:`Reservation` is what a dispatcher set aside before claiming — permits, rate
tokens — and how many jobs it may take; a :class:`Rider` is a dispatcher as the
completer sees it. The completer asks each rider for a reservation just before it writes
a batch, claims for all of them in the same statement, and hands each its jobs (or its
failure) back. Permit before claim holds on both paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from awa.db.rows import FleetHold
from awa.types import Job
from awa.worker.permits import Grant


@dataclass(slots=True)
class Reservation:
    """Permits and tokens set aside for one claim of ``limit`` jobs of ``queue``."""

    queue: str
    grant: Grant
    limit: int  # jobs the claim may take: the permits, cut by the rate limiter
    wanted: int  # what the dispatcher asked for (its claim batch size)
    deadline_ms: int
    args_bytes: int = 0  # room set aside in the process's ArgsBudget until the claim settles
    claimed_at: float = 0.0  # monotonic time the claim began (a claim's age is from here)
    # For a fleet-pool member: the asking process and the member's jobs it holds already,
    # so the claim is cut to this process's part of the member's share (ADR 0037).
    instance: str | None = None
    held: int | None = None

    def request(self) -> dict[str, Any]:
        """The claim as the riding statement takes it."""
        return {
            "queue": self.queue,
            "limit": self.limit,
            "deadline_ms": self.deadline_ms,
            "instance": self.instance,
            "held": self.held,
        }


class Rider(Protocol):
    """A dispatcher whose claims may ride on the completer's writes."""

    queue: str

    def ride(self) -> Reservation | None:
        """Reserve for a claim riding on the next write (None: nothing to claim now)."""
        ...

    def rode(
        self,
        reservation: Reservation,
        jobs: list[Job[Any]],
        hold: FleetHold | None,
        sizes: list[int],
    ) -> None:
        """The riding claim's result: launch ``jobs`` (``sizes``: their args in bytes),
        give back the rest."""
        ...

    def ride_failed(self, reservation: Reservation) -> None:
        """The write failed: give back everything reserved."""
        ...

    def rides_next(self) -> bool:
        """True when this rider's next claim would ride on the next write (so the write
        should not wait)."""
        ...
