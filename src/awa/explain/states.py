"""Probes for a job that is past waiting: where it runs, what it waits for, how it ended."""

from __future__ import annotations

from typing import Any

from awa.explain.facts import Facts
from awa.explain.finding import Finding, finding
from awa.explain.waiting import leader_pass, short_error
from awa.explain.wording import ago, at, duration, names, process, when
from awa.types import ReasonCode


def _where(f: Facts) -> tuple[str, str, dict[str, Any]]:
    """Which process runs the job — the one whose snapshot lists it, else the candidates —
    as (sentence part, summary part, details)."""
    listing, candidates = f.runners(f.job.id, f.job.attempted_at)
    if listing is not None:
        here = f"on {process(listing)}"
        return here, here, {"host": listing.hostname, "pid": listing.pid}
    queue = f"queue '{f.queue.name}'"
    if len(candidates) == 1:
        only = candidates[0]
        here = f"on {process(only)}"
        place = {"host": only.hostname, "pid": only.pid}
        return f"{here}, the only live process serving {queue}", here, place
    if candidates:
        listed = names([process(i) for i in candidates])
        return (
            f"on one of the {len(candidates)} live processes serving {queue} ({listed}); "
            "none has listed it in a snapshot yet",
            f"on one of {len(candidates)} processes",
            {},
        )
    if f.serving():
        return (
            f"but none of the live processes serving {queue} runs it (none lists it in a "
            "snapshot taken since its claim): the process that claimed it has probably "
            "stopped, and the maintenance leader's rescuer returns the job once its "
            "heartbeat is older than the staleness limit",
            "with no live process running it",
            {},
        )
    return (
        f"but no live process serves {queue}: the process that claimed it has probably "
        "stopped, and the maintenance leader's rescuer returns the job once its heartbeat "
        "is older than the staleness limit",
        "with no live process serving its queue",
        {},
    )


def _progress(progress: dict[str, Any] | None) -> str:
    if not progress or progress.get("percent") is None:
        return ""
    note = f" ({progress['message']})" if progress.get("message") else ""
    return f" Progress {float(progress['percent']):g}%{note}."


def _queue_has_deadline(f: Facts) -> bool:
    """Every live process serving the job's queue runs it with a deadline."""
    values = [s.runtime.effective.get("deadline_ms") for s in f.serving()]
    return bool(values) and all(isinstance(v, int) and v > 0 for v in values)


def _callback_in_attempt(f: Facts) -> tuple[str, str]:
    """(sentence, clause) on a callback the running attempt registered: waited for in
    wait_for_callback, which pauses the deadline (``deadline_at`` NULL, ADR 0029), or only
    registered so far (its handler still works, and may return WaitForCallback)."""
    if f.callback_id is None:
        return "", ""
    times_out = when(f.now, f.callback_timeout_at) if f.callback_timeout_at else None
    until = f", which times out at {times_out}," if times_out else ""
    if f.job.deadline_at is not None:
        return (
            f" Its handler registered callback {f.callback_id}{until} and is still working.",
            f", callback {f.callback_id} registered",
        )
    if not _queue_has_deadline(f):  # no deadline to tell a wait by
        return (
            f" Its handler registered callback {f.callback_id}{until} and waits for it in "
            "wait_for_callback or still works (its queue runs without a deadline, whose "
            "pause would tell the two apart); resume_external answers it.",
            f", callback {f.callback_id} registered",
        )
    timeout = (
        f"; the callback times out at {times_out}, raising awa.CallbackTimeout in the handler"
        if times_out
        else ""
    )
    return (
        f" Its handler waits in wait_for_callback for callback {f.callback_id} "
        f"(resume_external answers it), its deadline paused meanwhile{timeout}; or it is "
        "about to hand the job over by returning WaitForCallback.",
        f", waiting for callback {f.callback_id}",
    )


def running(f: Facts) -> Finding:
    """Where and since when it runs, its last heartbeat, progress and deadline."""
    job = f.job
    where, short, place = _where(f)
    since = job.attempted_at or job.run_at
    beat = f"; last heartbeat {ago(f.now, f.heartbeat_at)}" if f.heartbeat_at else ""
    deadline = f" Its deadline is {when(f.now, job.deadline_at)}." if job.deadline_at else ""
    parked, short_parked = _callback_in_attempt(f)
    return finding(
        ReasonCode.RUNNING,
        f"Running since {when(f.now, since)}, attempt {job.attempt} of {job.max_attempts}, "
        f"{where}{beat}.{parked}{_progress(job.progress)}{deadline}",
        f"is running {short} since {at(since)}{short_parked}",
        **place,
        attempted_at=since.isoformat(),
        heartbeat_at=f.heartbeat_at.isoformat() if f.heartbeat_at else None,
        progress=job.progress,
        callback_id=f.callback_id,
        callback_timeout_at=f.callback_timeout_at.isoformat() if f.callback_timeout_at else None,
    )


def waiting_external(f: Facts) -> Finding:
    """Parked by its handler until an external system calls back, or the timeout."""
    job = f.job
    then = "it is retried" if job.attempt < job.max_attempts else "it fails (last attempt)"
    timeout = (
        f" If no callback comes by {when(f.now, f.callback_timeout_at)}, {then}."
        if f.callback_timeout_at
        else ""
    )
    started = f", started {ago(f.now, job.attempted_at)}" if job.attempted_at else ""
    handed = (
        f"Its handler (attempt {job.attempt} of {job.max_attempts}{started}) handed it to "
        "an external system"
    )
    if f.callback_id is None:  # answered (resume_external) before the handler returned
        return finding(
            ReasonCode.WAITING_EXTERNAL,
            f"{handed}, whose answer came before the handler returned: the maintenance "
            f"leader's next pass makes it available{leader_pass(f)}",
            "was answered and waits to be made available",
        )
    return finding(
        ReasonCode.WAITING_EXTERNAL,
        f"{handed}: it waits for complete_external, fail_external, retry_external or "
        f"resume_external with callback id {f.callback_id}.{timeout}",
        "is waiting for an external callback",
        callback_id=f.callback_id,
        callback_timeout_at=f.callback_timeout_at.isoformat() if f.callback_timeout_at else None,
    )


def _ended(f: Facts) -> str:
    end = f.job.finalized_at or f.dead_lettered_at
    return when(f.now, end) if end else "an unknown time"


def completed(f: Facts) -> Finding:
    """Done: when, on which attempt, and how long the last attempt took."""
    job = f.job
    took = ""
    if job.finalized_at and job.attempted_at:
        seconds = (job.finalized_at - job.attempted_at).total_seconds()
        took = f"; the last attempt took {duration(seconds)}"
    return finding(
        ReasonCode.COMPLETED,
        f"Completed at {_ended(f)} on attempt {job.attempt} of {job.max_attempts}{took}.",
        f"completed at {at(job.finalized_at)}" if job.finalized_at else "completed",
        attempt=job.attempt,
    )


def failed(f: Facts) -> Finding:
    """Failed for good: the last error, and whether it went to the dead letter queue."""
    job = f.job
    last = job.errors[-1] if job.errors else {}
    error = short_error(last)
    if job.attempt < job.max_attempts:
        why = f"on attempt {job.attempt} of {job.max_attempts}, without retry"
    elif job.max_attempts == 1:
        why = "after its only attempt"
    else:
        why = f"after all {job.max_attempts} attempts"
    dlq = (
        f" It was moved to the dead letter queue {ago(f.now, f.dead_lettered_at)} "
        f"(awa dlq retry {job.id} runs it again)."
        if f.dead_lettered_at
        else f" awa job retry {job.id} runs it again."
    )
    return finding(
        ReasonCode.FAILED,
        f"Failed at {_ended(f)} {why}: {error.rstrip('.')}.{dlq}",
        f"failed: {error}",
        error=error,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        dead_letter=f.dead_lettered_at is not None,
    )


def cancelled(f: Facts) -> Finding:
    """Cancelled: when, and the reason recorded with it."""
    job = f.job
    last = job.errors[-1] if job.errors else {}
    reason = str(last.get("error") or "no reason recorded")
    return finding(
        ReasonCode.CANCELLED,
        f"Cancelled at {_ended(f)}: {reason}.",
        f"was cancelled: {reason}",
        reason=reason,
    )
