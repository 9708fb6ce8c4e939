"""Probes for the fleet-wide limits (CONTRACT §8–§9, ADR 0010): each reads the numbers the
claim itself decides by — the limits row, the running counts, the token bucket refilled
to now and the pool's room — so explain says "at its limit" exactly when the claim does.
"""

from __future__ import annotations

import math
import shlex

from awa.config import LIVE_WITHIN_MS, MAX_SNAPSHOT_INTERVAL_MS
from awa.explain.facts import AHEAD_CAP, Facts
from awa.explain.finding import Finding, finding
from awa.explain.waiting import waits
from awa.explain.wording import ago, count, duration, rate
from awa.types import ReasonCode

# A process is silent past its longest snapshot interval and a little more (its report
# may wait for a busy pool): it stopped, or is frozen.
SILENT_AFTER_S = MAX_SNAPSHOT_INTERVAL_MS / 1000 + 2


def _set(f: Facts) -> str:
    updated = f.fleet.updated_at
    return f" (set {ago(f.now, updated)})" if updated else ""


def _turn(f: Facts) -> tuple[float, float, str] | None:
    """(seconds to its turn, seconds to the next token, words) when the bucket lacks the
    tokens for this job and those ahead of it; None when it has them."""
    fleet = f.fleet
    turn = fleet.turn_s(f.queue.ahead)
    if turn is None or fleet.rate_limit is None or fleet.tokens is None:
        return None
    next_token = (math.floor(fleet.tokens) + 1 - fleet.tokens) / fleet.rate_limit
    ahead = f.queue.ahead
    verb = "takes" if ahead == 1 else "take"
    takers = (
        f"the {count(ahead, 'job')} ahead of it {verb} the first" if ahead
        else "it takes the next one"
    )  # fmt: skip
    words = (
        f"the bucket ({rate(fleet.rate_limit)}, burst {fleet.effective_burst}) holds "
        f"{fleet.tokens:.2f} tokens, the next is due in {duration(next_token)}, and {takers}, "
        f"so its turn comes in about {duration(turn)}"
    )
    return turn, next_token, words


def concurrency_limit(f: Facts) -> Finding | None:
    """The queue runs as many jobs as its fleet-wide cap allows (an unpartitioned queue)."""
    fleet = f.fleet
    if fleet.concurrency is None or fleet.partition_by is not None:
        return None
    if f.queue.running < fleet.concurrency:
        return None
    q = f.queue.name
    unattended, capped = f.unattended(), f.unattended_capped()
    return finding(
        ReasonCode.CONCURRENCY_LIMIT,
        f"Queue '{q}' may run {count(fleet.concurrency, 'job')} at once across the fleet"
        f"{_set(f)}, and {f.queue.running} {'is' if f.queue.running == 1 else 'are'} "
        f"running{_unattended(unattended, capped)}: it starts when one of them "
        f"{'ends or is rescued' if unattended else 'ends'} "
        f"(awa queue limits show {shlex.quote(q)}).",
        waits(f, f"queue '{q}' is at its fleet limit of {fleet.concurrency} running"),
        concurrency=fleet.concurrency,
        running=f.queue.running,
        unattended=unattended,
        unattended_capped=capped,
    )


def _unattended(n: int, capped: bool = False) -> str:
    """The running jobs no live process runs, as a clause (empty when none); ``capped``:
    only the first of the running jobs were looked at."""
    if not n:
        return ""
    if n == 1:
        why = (
            "the process that claimed it has probably stopped: it holds its slot until the "
            "rescuer returns it, once its heartbeat is older than the staleness limit"
        )
    else:
        why = (
            "the processes that claimed them have probably stopped: they hold their slots "
            "until the rescuer returns them, once their heartbeats are older than the "
            "staleness limit"
        )
    if capped:
        return (
            f", at least {n} of them (of the {AHEAD_CAP} heard from least lately) in no live "
            f"process ({why})"
        )
    return f", {n} of them in no live process ({why})"


def partition_limit(f: Facts) -> Finding | None:
    """The job's partition is at its concurrency or rate limit; other partitions are not."""
    fleet = f.fleet
    if fleet.partition_by is None or fleet.partition is None:
        return None
    limits = []
    unattended = 0
    if fleet.concurrency is not None and fleet.partition_running >= fleet.concurrency:
        unattended = f.unattended(fleet.partition)
        capped = f.unattended_capped()
        limits.append(
            f"it runs {fleet.partition_running} of its jobs{_unattended(unattended, capped)}, its "
            f"limit of {fleet.concurrency} per partition"
        )
    turn = _turn(f)
    if turn is not None:
        limits.append(turn[2])
    if not limits:
        return None
    q = f.queue.name
    return finding(
        ReasonCode.PARTITION_LIMIT,
        f"Partition {f.fleet.partition_label()} of queue '{q}' is at its fleet limit{_set(f)}: "
        f"{'; '.join(limits)}. The other partitions of '{q}' are not held back by it.",
        waits(f, f"partition {f.fleet.partition_label()} of queue '{q}' is at its limit"),
        partition_by=fleet.partition_by,
        partition=fleet.partition,
        running=fleet.partition_running,
        unattended=unattended,
        concurrency=fleet.concurrency,
        tokens=fleet.tokens,
        turn_in_s=round(turn[0], 3) if turn else None,
    )


def pool_limit(f: Facts) -> Finding | None:
    """The fleet pool gives the queue no more room now (its minimum and share are in use),
    or it has room but every process that could take the job runs its part of the share."""
    fleet = f.fleet
    if fleet.pool_total is None or fleet.pool_room is None:
        return None
    if fleet.pool_room > 0:
        return _at_pool_parts(f)
    q = f.queue.name
    # "no room … 3 of 4" read as a bug without what keeps the fourth slot (a review).
    kept = fleet.pool_total - fleet.pool_running
    spare = (
        f"; the other {count(kept, 'slot')} {'is' if kept == 1 else 'are'} kept for other "
        "members: their minimums, which stay theirs while unused, or the shares of those "
        "that wait too"
        if kept > 0
        else ""
    )
    return finding(
        ReasonCode.POOL_LIMIT,
        f"Queue '{q}' is a member of the fleet pool of {fleet.pool_total} (min "
        f"{fleet.pool_min_workers}, weight {fleet.pool_weight}) and the pool has no room "
        f"for it now: it runs {f.queue.running}, and the members run {fleet.pool_running} "
        f"of {fleet.pool_total}{spare} (awa pool show).",
        waits(f, f"the fleet pool has no room for queue '{q}'"),
        pool_total=fleet.pool_total,
        pool_running=fleet.pool_running,
        running=f.queue.running,
        min_workers=fleet.pool_min_workers,
        weight=fleet.pool_weight,
    )


def _at_pool_parts(f: Facts) -> Finding | None:
    """The pool has room, but each serving process with a free permit was held back at its
    part of the member's share (ADR 0037) at its last claim: explain said "its next poll
    claims it" while no process would (a review). As the processes' snapshots say, so it
    lags by up to one snapshot."""
    able = [s for s in f.serving() if s.free > 0]
    if not able or any(s.runtime.fleet is None or s.runtime.fleet.blocked != "pool" for s in able):
        return None
    fleet = f.fleet
    q = f.queue.name
    who = f"each of the {len(able)} processes" if len(able) > 1 else "the one process"
    # A process killed 10 s ago still counted among them, its part reserved, and the
    # sentence added up to more than ran (a review): a silent one is named.
    silent = [s.instance for s in able if s.instance.seen_ago_s > SILENT_AFTER_S]
    named = "".join(
        f" Process {i.hostname}:{i.pid} has not reported for {duration(i.seen_ago_s)} "
        f"(stopped or frozen?): its part stays reserved until its row is "
        f"{LIVE_WITHIN_MS // 1000} s old."
        for i in silent
    )
    return finding(
        ReasonCode.POOL_LIMIT,
        f"Queue '{q}' is a member of the fleet pool of {fleet.pool_total}, which has room "
        f"for {fleet.pool_room} more, but its share is split over the processes serving it "
        f"(ADR 0037) and {who} with a free permit runs its part: it "
        f"runs {f.queue.running}, the members {fleet.pool_running} of {fleet.pool_total}.{named} "
        f"It waits for a part to free: a job of '{q}' ending in one of them, or the "
        "processes serving it changing (a process that stopped keeps its part until its "
        f"row is {LIVE_WITHIN_MS // 1000} s old: awa runtime list).",
        waits(f, f"each process serving queue '{q}' runs its part of the fleet pool"),
        pool_total=fleet.pool_total,
        pool_room=fleet.pool_room,
        pool_running=fleet.pool_running,
        running=f.queue.running,
        processes_at_part=len(able),
    )


def fleet_rate_limited(f: Facts) -> Finding | None:
    """The queue's fleet-wide token bucket lacks the tokens for it and those ahead."""
    fleet = f.fleet
    if fleet.partition_by is not None:
        return None  # a partition's bucket: partition_limit says it
    turn = _turn(f)
    if turn is None or fleet.rate_limit is None:
        return None
    q = f.queue.name
    return finding(
        ReasonCode.RATE_LIMITED,
        f"Queue '{q}' is rate limited across the fleet to {rate(fleet.rate_limit)}"
        f"{_set(f)}: {turn[2]}.",
        waits(f, f"queue '{q}' is rate limited to {rate(fleet.rate_limit)} across the fleet"),
        fleet_rate=fleet.rate_limit,
        burst=fleet.effective_burst,
        tokens=fleet.tokens,
        next_token_in_s=round(turn[1], 3),
        ahead=f.queue.ahead,
        turn_in_s=round(turn[0], 3),
    )
