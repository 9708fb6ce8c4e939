"""Log lines for a job's path, as an :class:`~awa.worker.observe.Observer`.

Every worker installs one. Each record carries structured fields in ``extra``
(``event``, ``queue``, ``kind``, ``job_id``, ``run_lease``, ``attempt``, and where they
apply ``state`` (the job's new state), ``outcome`` (completed, retried, failed, cancelled,
snoozed, handed_back, waiting_external, as in the metrics, or ``stopped`` for a handler
ended from outside) and ``reason``), which :func:`awa.log.configure` renders.

Levels: a job starting or finishing is DEBUG (per job, so it is checked with
``isEnabledFor`` before anything is formatted); a retry, a cancellation (by its handler
or, while it runs, by an operator), a lost lease, a stale outcome and an override change
are INFO; a job that failed for good is WARNING. Successful
completions add nothing above DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from awa.types import Job, JobState
from awa.worker.observe import Observer
from awa.worker.results import Finalization

logger = logging.getLogger("awa")

MAX_ERROR_CHARS = 500

_OUTCOME_NAMES = {
    JobState.COMPLETED: "completed",
    JobState.RETRYABLE: "retried",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
    JobState.SCHEDULED: "snoozed",
}


_STOPS = {
    "cancelled": "cancelled by an operator while running",
    "lease lost": "lost its lease while running",
    "shutdown": "running at the worker's shutdown (the job goes back to its queue)",
}


def outcome_name(outcome: Finalization) -> str:
    """What ``outcome`` means for its job (``retryable`` → ``retried``; a job given back
    for want of a handler → ``handed_back``)."""
    if outcome.handed_back:
        return "handed_back"
    return _OUTCOME_NAMES.get(outcome.state, outcome.state.value)


def job_fields(job: Job[Any], event: str, **more: Any) -> dict[str, Any]:
    """The structured fields every job record carries."""
    return {
        "event": event,
        "queue": job.queue,
        "kind": job.kind,
        "job_id": job.id,
        "run_lease": job.run_lease,
        "attempt": job.attempt,
        **more,
    }


def _error_message(finalization: Finalization) -> str:
    if not finalization.error:
        return ""
    return str(finalization.error.get("error", ""))[:MAX_ERROR_CHARS]


class JobLog(Observer):
    """Writes the log records of job events under the ``awa`` logger."""

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "job %s (%s on %s) started: attempt %d of %d, picked up %.3fs after run_at",
                job.id, job.kind, job.queue, job.attempt, job.max_attempts, pickup_latency_s,
                extra=job_fields(job, "job_started", pickup_latency_s=pickup_latency_s),
            )  # fmt: skip

    def attempt_stopped(self, job: Job[Any], reason: str) -> None:
        # An operator's cancel, a lost lease and the worker's shutdown end a running
        # handler from outside: INFO, as a retry is (a shutdown's was logged nowhere, and
        # the job came back retryable with no line saying why, a review). A deadline is
        # logged with its outcome.
        if reason in _STOPS and logger.isEnabledFor(logging.INFO):
            what = _STOPS[reason]
            if reason == "shutdown" and job.attempt >= job.max_attempts:
                what = "running its last attempt at the worker's shutdown (the job fails)"
            logger.info(
                "job %s (%s on %s) %s: its handler was stopped",
                job.id, job.kind, job.queue, what,
                extra=job_fields(job, "job_stopped", reason=reason),
            )  # fmt: skip

    def job_finished(self, job: Job[Any], outcome: Finalization | None, duration_s: float) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            name = outcome_name(outcome) if outcome is not None else "stopped"
            logger.debug(
                "job %s (%s on %s) finished in %.3fs: %s",
                job.id, job.kind, job.queue, duration_s, name,
                extra=job_fields(job, "job_finished", outcome=name, duration_s=duration_s),
            )  # fmt: skip

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        for f in applied:
            if f.state is JobState.COMPLETED:
                continue
            if f.state is JobState.FAILED:
                self._failed(f, f.job)
            elif f.state is JobState.RETRYABLE:
                if logger.isEnabledFor(logging.INFO):
                    delay_s = (f.delay_ms or 0) / 1000
                    logger.info(
                        "job %s (%s on %s) will retry in %.1fs (attempt %d of %d): %s",
                        f.job.id, f.job.kind, f.job.queue, delay_s, f.job.attempt,
                        f.job.max_attempts, _error_message(f),
                        extra=job_fields(f.job, "job_retried", state="retryable",
                                         reason=_error_message(f), delay_s=delay_s),
                    )  # fmt: skip
            elif f.state is JobState.CANCELLED:
                if logger.isEnabledFor(logging.INFO):
                    logger.info(
                        "job %s (%s on %s) cancelled by its handler: %s",
                        f.job.id, f.job.kind, f.job.queue, _error_message(f),
                        extra=job_fields(f.job, "job_cancelled", state="cancelled",
                                         reason=_error_message(f)),
                    )  # fmt: skip
            elif f.state is JobState.WAITING_EXTERNAL:
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug(
                        "job %s (%s on %s) waits for its callback", f.job.id, f.job.kind,
                        f.job.queue, extra=job_fields(f.job, "job_waiting_external",
                                                      state=f.state.value),
                    )  # fmt: skip
            elif logger.isEnabledFor(logging.DEBUG):
                what = "handed back" if f.handed_back else "snoozed"
                logger.debug(
                    "job %s (%s on %s) %s for %.1fs",
                    f.job.id, f.job.kind, f.job.queue, what, (f.delay_ms or 0) / 1000,
                    extra=job_fields(f.job, f"job_{what.replace(' ', '_')}", state=f.state.value),
                )  # fmt: skip

    @staticmethod
    def _failed(f: Finalization, job: Job[Any]) -> None:
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "job %s (%s on %s) failed after attempt %d of %d: %s",
                job.id, job.kind, job.queue, job.attempt, job.max_attempts, _error_message(f),
                extra=job_fields(job, "job_failed", state="failed", reason=_error_message(f)),
            )  # fmt: skip

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        for f in stale:
            if f.dropped:  # logged as an error where it was dropped
                continue
            if f.cancelled_first:
                logger.info(
                    "job %s (%s on %s) cancelled by an operator as its handler returned: "
                    "outcome %s not recorded", f.job.id, f.job.kind, f.job.queue,
                    outcome_name(f),
                    extra=job_fields(f.job, "job_stopped", reason="cancelled",
                                     outcome=outcome_name(f)),
                )  # fmt: skip
                continue
            logger.info(
                "job %s (%s on %s): outcome %s refused, attempt %d lost its lease (run_lease %d)",
                f.job.id, f.job.kind, f.job.queue, outcome_name(f), f.job.attempt,
                f.run_lease,
                extra=job_fields(f.job, "outcome_stale", outcome=outcome_name(f)),
            )  # fmt: skip

    def override_changed(
        self, queue: str, effective: dict[str, Any], ignored: dict[str, str]
    ) -> None:
        if logger.isEnabledFor(logging.INFO):
            values = ", ".join(f"{key}={value}" for key, value in effective.items())
            logger.info(
                "queue %s: effective settings now %s%s",
                queue, values, f" ({len(ignored)} override(s) ignored)" if ignored else "",
                extra={"event": "overrides_applied", "queue": queue, "effective": effective,
                       "ignored": sorted(ignored)},
            )  # fmt: skip
