"""Lifecycle hooks: ``client.on_event("completed", callback)``.

Built on the worker's :class:`~awa.worker.observe.Observer` seam, so a hook fires only
after the state change it reports has committed — for outcomes, once that commit is on
the server's disk, so a server crash cannot make it fire twice (ADR 0017) — and never
for a stale attempt:

=============  ===========================================================================
``started``    a handler is about to run (its claim committed)
``completed``  the handler's success was written
``retried``    a failed attempt was written as retryable (the job runs again later)
``exhausted``  the job was written as failed (attempts used up or a terminal error)
``cancelled``  the handler returned ``Cancel``, or an operator cancelled the running job
=============  ===========================================================================

Callbacks take one :class:`JobEvent` and may be plain or ``async`` functions. Plain ones
run inline on the worker's event loop (keep them quick); async ones run as tasks. A hook
that raises (anything but KeyboardInterrupt) is logged under the ``awa`` logger and never
affects the job or other hooks.
Jobs rescued by the maintenance leader and outcomes of other processes fire nothing here.

``event.job`` carries the args as the handler gets them (the registered type). For an
outcome it is the job as that attempt ended: ``state`` is the state written and
``errors`` ends with the attempt's error, if any; its timestamps are the claim's.
An operator's cancel fires ``cancelled`` whether it stopped the handler or landed just as
the handler returned (the handler's outcome is then not recorded).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from awa import validate
from awa.errors import ValidationError
from awa.kinds import derive_kind
from awa.types import Job, JobState
from awa.worker.observe import Observer

if TYPE_CHECKING:
    from awa.worker.results import Finalization

logger = logging.getLogger("awa")


@dataclass(frozen=True, slots=True)
class JobEvent:
    """Something that happened to a job; ``error`` is the recorded reason, if any."""

    name: ClassVar[str] = "*"
    job: Job[Any]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class JobStarted(JobEvent):
    """A handler is about to run."""

    name: ClassVar[str] = "started"


@dataclass(frozen=True, slots=True)
class JobCompleted(JobEvent):
    """The job completed."""

    name: ClassVar[str] = "completed"


@dataclass(frozen=True, slots=True)
class JobRetried(JobEvent):
    """An attempt failed; the job will run again."""

    name: ClassVar[str] = "retried"


@dataclass(frozen=True, slots=True)
class JobExhausted(JobEvent):
    """The job failed for good."""

    name: ClassVar[str] = "exhausted"


@dataclass(frozen=True, slots=True)
class JobCancelled(JobEvent):
    """The job was cancelled while it ran."""

    name: ClassVar[str] = "cancelled"


EVENT_TYPES: dict[str, type[JobEvent]] = {
    cls.name: cls for cls in (JobStarted, JobCompleted, JobRetried, JobExhausted, JobCancelled)
}
_BY_STATE: dict[JobState, type[JobEvent]] = {
    JobState.COMPLETED: JobCompleted,
    JobState.RETRYABLE: JobRetried,
    JobState.FAILED: JobExhausted,
    JobState.CANCELLED: JobCancelled,
}

Callback = Callable[[Any], Any]


def _failed(event: JobEvent) -> dict[str, Any]:
    """The structured fields of a hook's failure record (as job records carry them)."""
    job = event.job
    return {"event": "hook_failed", "hook_event": event.name, "job_id": job.id,
            "kind": job.kind, "queue": job.queue}  # fmt: skip


def _as_ended(outcome: Finalization) -> Job[Any]:
    """The outcome's job as its attempt ended: the state written, the error appended."""
    job = outcome.job
    errors = job.errors if outcome.error is None else [*job.errors, outcome.error]
    return dataclasses.replace(job, state=outcome.state, errors=errors)


def _cancelled_by_operator(job: Job[Any]) -> JobCancelled:
    """The event of an operator's cancel of ``job``'s attempt: the job as it ended."""
    return JobCancelled(dataclasses.replace(job, state=JobState.CANCELLED), "cancelled by operator")


def event_type(kind_or_type: str | type[JobEvent]) -> type[JobEvent]:
    """``"completed"`` / ``JobCompleted`` → JobCompleted; ``"*"`` / ``JobEvent`` → all."""
    if isinstance(kind_or_type, type) and issubclass(kind_or_type, JobEvent):
        return kind_or_type
    if kind_or_type == "*":
        return JobEvent
    if kind_or_type == "failed":
        return JobExhausted
    if isinstance(kind_or_type, str) and kind_or_type in EVENT_TYPES:
        return EVENT_TYPES[kind_or_type]
    valid = ", ".join([*EVENT_TYPES, "*"])
    raise ValidationError("event", f"unknown event {kind_or_type!r} (valid: {valid})")


def _error_text(error: Any) -> str | None:
    """The message of a Finalization's error (a dict, or its JSON text)."""
    if error is None:
        return None
    if isinstance(error, str):
        try:
            error = json.loads(error)
        except ValueError:
            return str(error)
    return str(error.get("error")) if isinstance(error, dict) else str(error)


@dataclass(frozen=True, slots=True)
class _Subscription:
    event: type[JobEvent]
    callback: Callback
    job_kind: str | None
    is_async: bool


class Hooks(Observer):
    """The observer behind ``on_event``: turns worker events into :class:`JobEvent`s."""

    def needs_durable(self) -> bool:
        return True

    def __init__(self) -> None:
        self._subscriptions: list[_Subscription] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    def subscribe(
        self,
        kind_or_type: str | type[JobEvent],
        callback: Callback,
        *,
        job_kind: str | type[Any] | None = None,
    ) -> None:
        """Call ``callback`` for each matching event (of jobs of ``job_kind`` if given)."""
        if not callable(callback):
            raise ValidationError("callback", f"must be callable, got {type(callback).__name__}")
        kind: str | None = None
        if isinstance(job_kind, type):
            kind = derive_kind(job_kind)
        elif job_kind is not None:
            kind = validate.text("job_kind", job_kind)
        is_async = inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
            getattr(callback, "__call__", None)  # noqa: B004 - async callable objects
        )
        self._subscriptions.append(
            _Subscription(event_type(kind_or_type), callback, kind, is_async)
        )

    # -- observer events -------------------------------------------------------------

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        self._emit(JobStarted(job))

    def attempt_stopped(self, job: Job[Any], reason: str) -> None:
        if reason == "cancelled":
            # An operator's cancel of the running job: the cancel statement committed
            # before the notice that stopped this handler was sent.
            self._emit(_cancelled_by_operator(job))

    def outcomes_durable(self, durable: Sequence[Finalization]) -> None:
        for outcome in durable:
            event = _BY_STATE.get(outcome.state)
            if event is not None and outcome.job is not None:
                self._emit(event(_as_ended(outcome), _error_text(outcome.error)))

    def outcomes_stale(self, stale: Sequence[Finalization]) -> None:
        for outcome in stale:
            if outcome.cancelled_first:  # the operator's cancel committed (and is durable)
                self._emit(_cancelled_by_operator(outcome.job))

    # -- dispatch --------------------------------------------------------------------

    def _emit(self, event: JobEvent) -> None:
        for sub in self._subscriptions:
            if not isinstance(event, sub.event):
                continue
            if sub.job_kind is not None and event.job.kind != sub.job_kind:
                continue
            if sub.is_async:
                self._start(sub, event)
            else:
                try:
                    sub.callback(event)
                except KeyboardInterrupt:
                    raise
                except BaseException:  # a CancelledError too: a plain function's own
                    logger.exception("hook %r failed on %s of job %s", sub.callback, event.name,
                                     event.job.id, extra=_failed(event))  # fmt: skip

    def _start(self, sub: _Subscription, event: JobEvent) -> None:
        try:
            task = asyncio.get_running_loop().create_task(sub.callback(event))
        except Exception:
            logger.exception("hook %r failed on %s of job %s", sub.callback, event.name,
                             event.job.id, extra=_failed(event))  # fmt: skip
            return
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._finished(t, sub, event))

    def _finished(self, task: asyncio.Task[Any], sub: _Subscription, event: JobEvent) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error(
                "hook %r failed on %s of job %s", sub.callback, event.name, event.job.id,
                exc_info=exc, extra=_failed(event),
            )  # fmt: skip

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for running async hooks (True), or until ``timeout`` passes (False)."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(list(self._tasks), timeout=timeout)
        return not pending


__all__ = [
    "JobCancelled",
    "JobCompleted",
    "JobEvent",
    "JobExhausted",
    "JobRetried",
    "JobStarted",
]
