"""A bound on the bytes of job args a worker process holds in flight (issue 18.6).

Args may be up to 1 MiB each, and a claim returns up to ``claim_batch_size`` jobs at
once: 512 jobs of 1 MiB took a worker to 1 GiB (the driver's result and the decoded
args side by side). The budget keeps the args of claimed, unfinished jobs near
``max_bytes`` for the whole process (every queue shares it):

- before a claim, :meth:`ArgsBudget.claimable` says how many jobs to ask for: as many as
  the room left holds at the *estimated* size of one job's args (none when not even one
  fits; the dispatchers are woken when one does);
- after it, :meth:`ArgsBudget.hold` charges each job's actual size (read from the
  driver's result, no decoding) and returns the callback that gives it back when the
  job's permit is released.

The size of the next jobs is unknown before they are claimed, so the estimate starts at
the largest args allowed (the first claims of a fresh worker are small) and follows what
claims return: the mean of each claim, or half the previous estimate if that is larger,
so it falls fast after a run of big jobs but rises at once. The bound is therefore
approximate: one claim can overshoot it by its jobs beyond the estimate. With nothing in
flight a claim may always take one job, so a job bigger than the budget still runs.

Pure bookkeeping, no I/O: the dispatcher asks and charges, the permits give back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from awa.db.rows import HasResult

Wake = Callable[[], None]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
INITIAL_ESTIMATE = 1024 * 1024  # the largest args an insert accepts (MAX_ARGS_BYTES)


class ArgsBudget:
    """Bytes of args held by running jobs, against ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, *, estimate: int = INITIAL_ESTIMATE):
        self.max_bytes = max_bytes
        self.estimate = max(1, estimate)
        self.in_flight = 0  # bytes charged and not yet given back
        # Bytes set aside for claims under way (at the estimate): two claims of one process
        # can be in flight at once (a dispatcher's own and one riding on the completer's
        # write, ADR 0012), and neither may count on room the other is about to fill.
        self.reserved = 0
        self.peak = 0
        self._wakers: list[Wake] = []
        self._refused = False  # a claim was refused since the last wake

    def subscribe(self, wake: Wake) -> None:
        """Call ``wake`` when room frees up after the budget was spent."""
        self._wakers.append(wake)

    def claimable(self, wanted: int) -> int:
        """How many of ``wanted`` jobs a claim may ask for now: as many as the room left
        holds at the estimated size — and one when nothing is in flight, so that a job
        bigger than the whole budget still runs (alone)."""
        if wanted <= 0:
            return 0
        fits = (self.max_bytes - self.in_flight - self.reserved) // self.estimate
        if fits <= 0 and self.in_flight == 0 and self.reserved == 0:
            fits = 1
        if fits <= 0:
            self._refused = True
            return 0
        return min(wanted, fits)

    def reserve(self, count: int) -> int:
        """Set aside room for a claim of ``count`` jobs; returns the bytes to hand back to
        :meth:`unreserve` once the claim has charged its jobs (or failed)."""
        nbytes = count * self.estimate
        self.reserved += nbytes
        return nbytes

    def unreserve(self, nbytes: int) -> None:
        """Release what :meth:`reserve` set aside."""
        self.reserved -= nbytes

    def observe(self, sizes: Sequence[int]) -> None:
        """Update the estimate from the args sizes of one claim's jobs."""
        if sizes:
            mean = sum(sizes) // len(sizes)
            self.estimate = max(1, mean, self.estimate // 2)

    def hold(self, nbytes: int) -> Callable[[], None]:
        """Charge one job's ``nbytes``; returns the idempotent callback giving them back."""
        self.in_flight += nbytes
        self.peak = max(self.peak, self.in_flight)
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._give_back(nbytes)

        return give_back

    def _give_back(self, nbytes: int) -> None:
        self.in_flight -= nbytes
        # Wake the dispatchers only when one was refused and a job now fits: every queue
        # shares the budget, so room freed by one queue's job may be another's turn.
        if self._refused and self.claimable(1):
            self._refused = False
            for wake in self._wakers:
                wake()


def args_sizes(cursor: HasResult) -> list[int]:
    """Byte length of the ``args`` column of every row of the cursor's last result, read
    from the driver's result without decoding (psycopg exposes no ``PQgetlength``, so the
    value is copied: a memcpy, a small fraction of decoding the same JSON)."""
    result = cursor.pgresult
    if result is None:
        return []
    names = [result.fname(i) for i in range(result.nfields)]
    column = names.index(b"args")
    return [len(result.get_value(row, column) or b"") for row in range(result.ntuples)]
