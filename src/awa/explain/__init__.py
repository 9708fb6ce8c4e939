"""Why isn't my job running? (CONTRACT §11) — explanations computed from facts.

:func:`explain` runs the reason probes of the job's state, in the order of
:data:`PROBES` (most decisive first), keeps every reason that applies, and writes the
summary from the first. Each probe is a pure function of :class:`~.facts.Facts` — the job
row and its queue's numbers as the database has them, and the live workers' published
snapshots — so a new kind of limit is one more probe in the table. The I/O that gathers
the facts is in :mod:`awa.client.explain`.
"""

from __future__ import annotations

from awa.explain import fleet, ordering, states, waiting
from awa.explain.facts import Facts
from awa.explain.finding import Finding, Probe
from awa.types import Explanation, JobState, ReasonCode

PROBES: dict[JobState, tuple[Probe, ...]] = {
    JobState.AVAILABLE: (
        waiting.queue_paused,
        ordering.ordered_behind,
        waiting.no_live_worker,
        fleet.concurrency_limit,
        fleet.partition_limit,
        fleet.pool_limit,
        waiting.workers_busy,
        fleet.fleet_rate_limited,
        waiting.rate_limited,
        waiting.queued_behind,
    ),
    # Not due yet; what would hold it back once due is worth knowing now.
    JobState.SCHEDULED: (waiting.scheduled, waiting.queue_paused, waiting.no_live_worker),
    JobState.RETRYABLE: (waiting.retry_backoff, waiting.queue_paused, waiting.no_live_worker),
    JobState.RUNNING: (states.running,),
    JobState.WAITING_EXTERNAL: (states.waiting_external,),
    JobState.COMPLETED: (states.completed,),
    JobState.FAILED: (states.failed,),
    JobState.CANCELLED: (states.cancelled,),
}


def findings(facts: Facts) -> list[Finding]:
    """Every reason that applies to the job, most decisive first (never empty)."""
    found = [x for probe in PROBES[facts.job.state] if (x := probe(facts)) is not None]
    return _tighter_rate_first(found) or [waiting.next_up(facts)]  # nothing in its way


def _tighter_rate_first(found: list[Finding]) -> list[Finding]:
    """The fleet's bucket and the processes' own limiters both meter a queue: the one that
    makes the job wait longer decides, whichever probe came first (the summary named the
    looser fleet rate while the processes' ran it at half: a review)."""
    rated = [i for i, x in enumerate(found) if x.reason.code is ReasonCode.RATE_LIMITED]
    if len(rated) == 2:
        first, second = rated
        if _turn(found[second]) > _turn(found[first]):
            found[first], found[second] = found[second], found[first]
    return found


def _turn(x: Finding) -> float:
    return float(x.reason.details.get("turn_in_s", 0.0))


def explain(facts: Facts) -> Explanation:
    """The explanation of ``facts.job``: its reasons and a one-sentence summary."""
    found = findings(facts)
    job = facts.job
    return Explanation(
        job=job,
        reasons=[x.reason for x in found],
        summary=f"Job {job.id} ({job.kind}) {found[0].clause}.",
    )


__all__ = ["PROBES", "Facts", "explain", "findings"]
