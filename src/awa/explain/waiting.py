"""Probes for a job that is not running yet: why it waits, each from the facts alone.

A job that is due waits for the first of these that holds, in this order (CONTRACT §11):
its queue is paused; no live process serves the queue; every permit the serving
processes have for it is held; their rate limiters hold it back; jobs ahead of it go
first. A scheduled or retrying job waits for its time, and the first two matter to it too.
"""

from __future__ import annotations

import shlex

from awa.config import LIVE_WITHIN_MS
from awa.explain.facts import (
    AHEAD_CAP,
    RATE_WINDOW_S,
    Facts,
    Serving,
    overflow_holders,
    overflow_pool,
)
from awa.explain.finding import Finding, finding
from awa.explain.wording import (
    ago,
    at,
    count,
    duration,
    names,
    process,
    rate,
    relative,
    when,
)
from awa.types import ReasonCode

ERROR_CHARS = 300  # an error's first line, cut here, is enough to say what went wrong


def waits(f: Facts, because: str) -> str:
    """The summary clause of a due job: how long it has waited, and why."""
    return f"has waited {duration(f.waited_s())}: {because}"


def leader_pass(f: Facts) -> str:
    """The end of a sentence saying the maintenance leader's next pass acts: a full stop,
    or that no worker process is live to run it."""
    return "." if f.live else ", but no worker process is live to run that pass."


def _queue(f: Facts) -> str:
    return f"queue '{f.queue.name}'"


def short_error(entry: dict[str, object]) -> str:
    """``Type: first line of the message`` of one ``errors`` entry, cut to a readable size."""
    text = str(entry.get("error") or "unknown error").strip().splitlines()
    line = text[0] if text else "unknown error"
    if len(line) > ERROR_CHARS:
        line = line[: ERROR_CHARS - 1] + "…"
    kind = entry.get("type")
    return f"{kind}: {line}" if kind else line


# -- not due yet ---------------------------------------------------------------------


def _handed_back(f: Facts) -> tuple[str, str]:
    """(sentence, clause) for a job a process handed back because it has no handler for
    its kind (``metadata.unknown_kind``, ADR 0027); empty when that is not why it waits."""
    record = f.job.metadata.get("unknown_kind")
    if not isinstance(record, dict):
        return "", ""
    times = count(int(record.get("count") or 1), "time")
    who = f"{record.get('host')} pid {record.get('pid')}"
    return (
        f" It was handed back {times}, without spending an attempt: the last process to "
        f"claim it ({who}) has no handler for kind '{f.job.kind}'. It is tried again "
        "after each backoff until a process that has one claims it.",
        f"was handed back {times} (no handler for kind '{f.job.kind}' in {who})",
    )


def scheduled(f: Facts) -> Finding:
    """A scheduled job waits for its ``run_at`` (or for the promoter, once due)."""
    job = f.job
    handed, handed_clause = _handed_back(f)
    snoozed = " Its handler snoozed it." if job.attempted_at is not None and not handed else ""
    if job.run_at > f.now:
        message = f"Scheduled to run at {when(f.now, job.run_at)}; no worker claims it before."
        clause = f"is scheduled to run at {at(job.run_at)} ({relative(f.now, job.run_at)})"
    else:
        message = (
            f"Due since {ago(f.now, job.run_at)}: the maintenance leader's next promotion "
            "pass makes it available" + leader_pass(f)
        )
        clause = f"is due since {ago(f.now, job.run_at)} and waits to be promoted"
    if handed_clause:
        clause = f"{handed_clause}; it is tried again {relative(f.now, job.run_at)}"
    return finding(
        ReasonCode.SCHEDULED,
        message + snoozed + handed,
        clause,
        run_at=job.run_at.isoformat(),
        due_in_s=round((job.run_at - f.now).total_seconds(), 3),
        handed_back=job.metadata.get("unknown_kind") if handed else None,
    )


def retry_backoff(f: Facts) -> Finding:
    """A retryable job waits out its backoff after a failed attempt."""
    job = f.job
    last = job.errors[-1] if job.errors else {}
    failed_attempt = int(last.get("attempt") or job.attempt)
    error = short_error(last)
    if job.run_at > f.now:
        next_try = f"The next attempt is due at {when(f.now, job.run_at)}."
    else:
        next_try = (
            f"The next attempt is due since {ago(f.now, job.run_at)}: the maintenance "
            "leader's next promotion pass makes it available" + leader_pass(f)
        )
    if last.get("type") == "RetryAfter":  # not a failure: the handler asked for a retry
        what = f"Attempt {failed_attempt} of {job.max_attempts} asked to be retried later"
        said = str(last.get("error") or "").strip().rstrip(".")
        outcome = f"{what} ({said})" if said and said != "RetryAfter" else what
    else:
        outcome = f"Attempt {failed_attempt} of {job.max_attempts} failed: {error.rstrip('.')}"
    return finding(
        ReasonCode.RETRY_BACKOFF,
        f"{outcome}. {next_try}",
        f"failed attempt {failed_attempt} of {job.max_attempts} and retries at "
        f"{at(job.run_at)} ({relative(f.now, job.run_at)})",
        attempt=failed_attempt,
        max_attempts=job.max_attempts,
        error=error,
        next_attempt_at=job.run_at.isoformat(),
    )


# -- due, but held back ----------------------------------------------------------------


def queue_paused(f: Facts) -> Finding | None:
    """The queue is paused: no worker claims its jobs (the claim itself checks)."""
    q = f.queue
    if not q.paused:
        return None
    by = f" by {q.paused_by}" if q.paused_by else ""
    since = f" since {when(f.now, q.paused_at)}" if q.paused_at else ""
    return finding(
        ReasonCode.QUEUE_PAUSED,
        f"Queue '{q.name}' is paused{by}{since}: no worker claims its jobs until it is "
        f"resumed (awa queue resume {shlex.quote(q.name)}).",
        waits(f, f"{_queue(f)} is paused{by}"),
        paused_by=q.paused_by,
        paused_at=q.paused_at.isoformat() if q.paused_at else None,
    )


def no_live_worker(f: Facts) -> Finding | None:
    """No live process lists the queue in its snapshot."""
    if f.serving():
        return None
    live = [i for i in f.live if i.snapshot is not None]
    if live:
        served = sorted({name for i in live if i.snapshot for name in i.snapshot.queues})
        listed = names([f"'{name}'" for name in served]) or "no queue"
        verb = "serves" if len(live) == 1 else "serve"
        others = (
            f"The {count(len(live), 'live worker process', 'live worker processes')} "
            f"{verb} {listed}."
        )
    else:
        others = (
            f"No worker process has reported in the last {LIVE_WITHIN_MS // 1000} s, so "
            "nothing claims, promotes or rescues jobs at all."
        )
    return finding(
        ReasonCode.NO_LIVE_WORKER,
        f"No live worker process serves {_queue(f)}. {others}",
        waits(f, f"no live worker serves {_queue(f)}"),
        live_processes=[
            {"host": i.hostname, "pid": i.pid, "queues": sorted(i.snapshot.queues)}
            for i in live
            if i.snapshot
        ],
    )


def _holds(s: Serving, f: Facts) -> str:
    age = ago(f.now, s.instance.last_seen_at)
    held = f"{process(s.instance)} holds {s.held} of {s.limit} (reported {age})"
    others = overflow_holders(s.instance, f.queue.name)
    if not others:
        return held
    # Weighted: the queue has only its minimum while other queues hold the overflow.
    listed = names([f"'{name}' {n}" for name, n in others.items()])
    return f"{held}, its shared overflow held by {listed}"


def _every_permit_held(permits: int, queue: str) -> str:
    if permits == 0:  # weighted, at a minimum of 0 while other queues hold the overflow
        return f"no permit is free for {queue}"
    if permits == 1:
        return f"its one permit for {queue} is in use"
    return f"all {permits} permits for {queue} are in use"


def _never_given(serving: list[Serving], queue: str) -> str:
    """When no serving process can ever give the queue a permit as configured (weighted,
    a minimum of 0, the others' minimums taking the whole pool), a sentence saying so:
    "in use" read as a wait that ends (a review)."""
    if any(s.limit > 0 or overflow_pool(s.instance) != 0 for s in serving):
        return ""
    return (
        f" Its min_workers is 0 and the other queues' minimums take the whole "
        f"global_max_workers of every process serving it, so it gets no permit until a "
        f"minimum is lowered (awa queue overrides show {shlex.quote(queue)})."
    )


def workers_busy(f: Facts) -> Finding | None:
    """Every serving process has all the permits it could give the queue in use."""
    serving = f.serving()
    if not serving or f.free_permits() > 0:
        return None
    total = sum(s.limit for s in serving)
    never = _never_given(serving, f.queue.name)
    # Reports come every few seconds: "holds 0 of 1" beside "counts 1 running" read as a
    # contradiction right after a claim (a review).
    behind = (
        " (reports older than the latest claims)"
        if sum(s.held for s in serving) < f.queue.running
        else ""
    )
    return finding(
        ReasonCode.WORKERS_BUSY,
        f"Every permit for {_queue(f)} on the live processes serving it is in use: the "
        f"database counts {count(f.queue.running, 'running job')} of the queue against "
        f"{count(total, 'permit')}: {names([_holds(s, f) for s in serving])}{behind}."
        f"{never}",
        waits(f, _every_permit_held(total, _queue(f))),
        running=f.queue.running,
        permits=total,
        processes=[
            {"host": s.instance.hostname, "pid": s.instance.pid, "held": s.held, "limit": s.limit}
            for s in serving
        ],
    )


def rate_limited(f: Facts) -> Finding | None:
    """Permits are free, but every process that has one meters the queue by a rate."""
    serving = f.serving()
    if not serving or f.free_permits() == 0:
        return None
    if any(s.rate_limit is None for s in serving if s.free > 0):
        return None  # a process with a free permit and no limiter would just claim it
    rates = [s.rate_limit for s in serving if s.rate_limit is not None]
    fleet = sum(rates)
    per_process = names(sorted({rate(r) for r in rates}))
    ahead = f.queue.ahead
    turn = (ahead + 1) / fleet
    takers = (
        f"the {count(ahead, 'job')} ahead of it {'takes' if ahead == 1 else 'take'} the next "
        f"{'one' if ahead == 1 else 'ones'}"
        if ahead
        else "it takes the next one"
    )
    return finding(
        ReasonCode.RATE_LIMITED,
        f"Queue '{f.queue.name}' is rate limited to {per_process} per process, "
        f"{rate(fleet)} across the {count(len(serving), 'live process', 'live processes')} "
        f"serving it: a token comes due every {duration(1 / fleet)}, and {takers}, so its "
        f"turn comes in about {duration(turn)}.",
        waits(f, f"{_queue(f)} is rate limited to {rate(fleet)}"),
        rate_per_process=rates,
        fleet_rate=fleet,
        ahead=ahead,
        turn_in_s=round(turn, 3),
    )


def _ahead_text(ahead: int) -> str:
    if ahead >= AHEAD_CAP:
        return f"At least {AHEAD_CAP:,} jobs".replace(",", " ")
    return count(ahead, "job")


def _no_rate(f: Facts) -> str:
    """Why the recent completions give no rate for the job's line."""
    q, window = f.queue, duration(RATE_WINDOW_S)
    if q.completed_recently == 0:
        return f"no job of the queue completed in the last {window}"
    if q.completed_recently == 1:
        return f"only one job of the queue completed in the last {window}"
    return f"none of the queue's last {q.completed_recently} completions was of its partition"


def _paced_by_the_bucket(f: Facts, completion: float | None) -> bool:
    """The fleet bucket makes the jobs ahead wait longer than the recent completions say
    they take (with a cap holding the queue too, the completions may be the slower).

    A partition's bucket of its own, with no cap: its share of the queue's completions
    says how much of the work was its key's, not how fast its key may go — a key just
    come had 1 of 19 and was told 9.0 s beside its bucket's turn of 1.2 s (a review)."""
    turn = f.fleet.turn_s(f.queue.ahead)
    if turn is None:
        return False
    own_bucket = f.queue.completed_in_partition is not None and f.fleet.concurrency is None
    return own_bucket or not completion or turn >= f.queue.ahead / completion


def queued_behind(f: Facts) -> Finding | None:
    """Jobs ahead of it in claim order (priority, then the earliest due) go first."""
    ahead = f.queue.ahead
    if ahead == 0:
        return None
    q = f.queue
    completion = q.completion_rate(f.now)
    partitioned = q.completed_in_partition is not None
    line = f"partition {f.fleet.partition_label()} of {_queue(f)}" if partitioned else _queue(f)
    if _paced_by_the_bucket(f, completion):
        # The fleet bucket's turn (its own reason) is the longer wait: a rate from past
        # completions, idle time included, contradicted it (a review: 15 s against 4 s).
        completion = None
        estimate = "the fleet rate limit paces them, so its turn is the bucket's (above)"
    elif completion:
        about = "at least" if ahead >= AHEAD_CAP else "about"
        span = duration(q.rate_span_s(f.now))
        share = (
            f"its partition's share ({q.completed_in_partition} of the queue's last "
            f"{q.completed_recently} completions) of the queue's recent rate, "
            if partitioned
            else "the recent completion rate of "
        )
        estimate = (
            f"at {share}{rate(completion)} (last {span}) they take {about} "
            f"{duration(ahead / completion)}"
        )
    else:
        estimate = f"{_no_rate(f)}, so there is no rate to estimate the wait from"
    verb = "is" if ahead == 1 else "are"
    return finding(
        ReasonCode.QUEUED_BEHIND,
        f"{_ahead_text(ahead)} of {line} {verb} ahead of it in claim order "
        f"(priority, then the earliest due); {estimate}.",
        waits(f, f"{count(ahead, 'job')} {verb} ahead of it in {line}"),
        ahead=ahead,
        ahead_capped=ahead >= AHEAD_CAP,
        completion_rate=completion,
        estimated_wait_s=round(ahead / completion, 3) if completion else None,
    )


def next_up(f: Facts) -> Finding:
    """Nothing holds it back: the next poll of a process with a free permit claims it."""
    polls = [s.poll_interval_ms for s in f.serving() if s.poll_interval_ms is not None]
    every = f" (every {duration(min(polls) / 1000)}, or at once when notified)" if polls else ""
    return finding(
        ReasonCode.QUEUED_BEHIND,
        f"Nothing is ahead of it in {_queue(f)} and a live process serving it has a free "
        f"permit: its next poll{every} claims it. It has been due for "
        f"{duration(f.waited_s())}.",
        waits(f, f"it is next in {_queue(f)}"),
        ahead=0,
    )
