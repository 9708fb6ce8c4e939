"""The probe for a job with an ordering key (ADR 0034): it runs only at its key's turn.

Its turn comes when no job of the key with a lower id is unfinished and no job of the key
is running or parked for a callback — the two facts the claim's ``awa.ordering_ready``
reads. The finding names the job the key waits for, so an operator can look at that one.
"""

from __future__ import annotations

from awa.explain.facts import AHEAD_CAP, Facts, KeyJob
from awa.explain.finding import Finding, finding
from awa.explain.waiting import waits
from awa.explain.wording import count
from awa.types import ReasonCode


def _named(job: KeyJob) -> str:
    return f"job {job.id} ({job.state}, queue '{job.queue}')"


def ordered_behind(f: Facts) -> Finding | None:
    """An earlier job of its ordering key is unfinished, or a job of the key has started."""
    line = f.ordering
    if line is None:
        return None
    holder = line.first or line.started
    if holder is None:
        return None
    key = line.key
    if line.first is not None:
        ahead = line.ahead
        more = "at least " if ahead >= AHEAD_CAP else ""
        before = (
            f"{more}{count(ahead, 'unfinished job')} of ordering key {key!r} "
            f"{'comes' if ahead == 1 else 'come'} before it, the first {_named(line.first)}"
        )
        message = (
            f"Jobs of ordering key {key!r} run one at a time in insertion order: {before}. "
            "It starts once every one of them has finished (completed, failed or "
            f"cancelled) — look at job {line.first.id} (awa job explain {line.first.id})."
        )
        clause = f"ordering key {key!r} waits for {_named(line.first)}"
    else:
        assert line.started is not None
        message = (
            f"Jobs of ordering key {key!r} run one at a time: {_named(line.started)} has "
            "started (it was committed before this earlier job became visible) and holds "
            "the key until it finishes."
        )
        clause = f"ordering key {key!r} is held by {_named(line.started)}"
    return finding(
        ReasonCode.ORDERED_BEHIND,
        message,
        waits(f, clause),
        ordering_key=key,
        ahead=line.ahead,
        ahead_capped=line.ahead >= AHEAD_CAP,
        waiting_for=holder.id,
        waiting_for_state=holder.state,
        waiting_for_queue=holder.queue,
    )
