"""Handlers that do something odd still get the outcome they earned, and the worker goes
on: an exception whose ``__str__`` raises even KeyboardInterrupt, a coroutine returned
instead of awaited, an outcome class instead of an instance, a job's identity changed."""

from __future__ import annotations

import functools
import gc
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any

import pytest

import awa
from awa.serialization import decode_args
from awa.types import Job, JobState
from awa.worker import results
from awa.worker.executor import Executor
from awa.worker.registry import TaskRegistry
from tests.helpers import wait_for
from tests.unit.fakes import FakeCompleter, FakePermit


def _job(max_attempts: int = 3) -> Job[Any]:
    now = datetime.now(UTC)
    return Job(
        id=618, kind="k", queue="q", args={}, state=JobState.RUNNING, priority=2, attempt=1,
        max_attempts=max_attempts, run_lease=4, tags=[], metadata={}, progress=None,
        errors=[], created_at=now, run_at=now, attempted_at=now, deadline_at=None,
        finalized_at=None,
    )  # fmt: skip


async def _run(handler: Callable[..., Any], job: Job[Any] | None = None) -> results.Finalization:
    registry = TaskRegistry()
    registry.register(None, handler, kind="k", queue="q")
    completer = FakeCompleter()
    executor = Executor(registry, completer, threads=1)  # type: ignore[arg-type]
    permit = FakePermit()
    executor.launch(job or _job(), permit, deadline_ms=0)  # type: ignore[arg-type]

    async def ended() -> bool:
        return permit.released == 1

    await wait_for(ended)
    assert executor.in_flight() == []  # forgotten: no longer heartbeated
    (outcome,) = completer.outcomes
    return outcome


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise KeyboardInterrupt


@pytest.mark.parametrize("chained", [False, True])
async def test_an_exception_whose_str_raises_keyboard_interrupt_is_the_attempts_error(
    chained: bool,
) -> None:
    """It stopped the whole worker (exit 130), every attempt in flight left running."""

    async def handler(job: Job[Any]) -> None:
        if chained:
            try:
                raise _Unprintable()
            except _Unprintable as exc:
                raise ValueError("outer") from exc
        raise _Unprintable()

    outcome = await _run(handler)
    assert outcome.state is JobState.RETRYABLE
    assert outcome.error is not None
    if chained:
        assert outcome.error["error"] == "outer" and outcome.error["type"] == "ValueError"
        assert "ValueError: outer" in outcome.error["traceback"]
    else:
        assert outcome.error["error"] == "<_Unprintable: str() failed with KeyboardInterrupt>"


async def test_a_coroutine_returned_unawaited_fails_the_attempt_and_never_warns() -> None:
    ran: list[int] = []

    async def send(job: Job[Any]) -> None:
        ran.append(job.id)

    async def handler(job: Job[Any]) -> Any:
        return send(job)  # the missing await

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = await _run(handler)
        gc.collect()
    assert ran == []
    assert outcome.state is JobState.RETRYABLE and outcome.error is not None
    assert outcome.error["type"] == "TypeError"
    assert "without awaiting it" in outcome.error["error"]
    assert not [w for w in caught if "never awaited" in str(w.message)]


async def test_an_async_function_under_a_plain_decorator_fails_instead_of_completing() -> None:
    """awa runs the wrapper as a ``def``; it returns the coroutine, never run."""
    ran: list[int] = []

    async def send(job: Job[Any]) -> None:
        ran.append(job.id)

    @functools.wraps(send)
    def logged(job: Job[Any]) -> Any:
        return send(job)

    outcome = await _run(logged)
    assert ran == [] and outcome.state is JobState.RETRYABLE and outcome.error is not None
    assert "plain decorator" in outcome.error["error"]


@pytest.mark.parametrize("cls", [awa.Cancel, awa.Snooze, awa.RetryAfter])
async def test_an_outcome_class_instead_of_an_instance_is_an_error(cls: type) -> None:
    async def handler(job: Job[Any]) -> Any:
        return cls

    outcome = await _run(handler)
    assert outcome.state is JobState.RETRYABLE and outcome.error is not None
    assert f"returned the class awa.{cls.__name__}, not an instance" in outcome.error["error"]


async def test_an_incidental_return_value_still_completes() -> None:
    async def handler(job: Job[Any]) -> Any:
        return {"sent": 3}

    assert (await _run(handler)).state is JobState.COMPLETED


@pytest.mark.parametrize("sync", [False, True])
async def test_a_handler_changing_its_jobs_identity_changes_nothing(sync: bool) -> None:
    """``job.attempt = 0`` retried for ever; ``job.id``/``job.run_lease`` wrote the
    outcome to no row and left the job running, heartbeated for the worker's life."""

    def mutate(job: Job[Any]) -> None:
        job.attempt, job.max_attempts = 0, 1000
        job.id, job.run_lease, job.kind, job.queue = job.id + 1_000_000, 0, "other", "elsewhere"
        raise RuntimeError("boom")

    async def async_mutate(job: Job[Any]) -> None:
        mutate(job)

    job = _job(max_attempts=3)
    job.attempt = 3  # the last one
    outcome = await _run(mutate if sync else async_mutate, job)
    assert outcome.state is JobState.FAILED  # attempts used up, whatever it set
    record = outcome.record()
    assert (record["id"], record["run_lease"]) == (618, 4)
    assert outcome.error is not None and outcome.error["attempt"] == 3
    assert (job.kind, job.queue, job.max_attempts) == ("k", "q", 3)


async def _two(job: Job[Any], extra: int) -> None: ...


class _Bound:
    def handle(self, job: Job[Any]) -> None: ...


def _with_session(handler: Callable[[Job[Any], str], None]) -> Callable[[Job[Any]], None]:
    """A decorator that supplies a dependency: its wrapper takes the job alone."""

    @functools.wraps(handler)
    def wrapper(job: Job[Any]) -> None:
        handler(job, "a db session")

    return wrapper


@_with_session
def _injected(job: Job[Any], session: str) -> None: ...


@pytest.mark.parametrize(
    "handler",
    [lambda: None, _two, _Bound.handle],
    ids=["no parameter", "two required", "unbound method"],
)
def test_a_handler_that_cannot_take_the_job_is_refused_at_registration(
    handler: Callable[..., Any],
) -> None:
    """Accepted, every job of its kind failed with a TypeError and was retried to its last
    attempt (a review: handlers from an untyped table)."""
    with pytest.raises(awa.ValidationError, match=r"must take one argument, the awa\.Job"):
        TaskRegistry().register(None, handler, kind="k", queue="q")


@pytest.mark.parametrize(
    "handler",
    [lambda job: None, lambda job, extra=1: None, lambda *args: None, _Bound().handle,
     functools.partial(_two, extra=1), print, _injected],
    ids=["one", "one and a default", "varargs", "bound method", "partial", "builtin",
         "wraps, injecting"],
)  # fmt: skip
def test_handlers_that_can_take_the_job_alone_are_registered(
    handler: Callable[..., Any],
) -> None:
    assert TaskRegistry().register(None, handler, kind="k", queue="q").handler is handler


@pytest.mark.parametrize("args_type", ["send_mail", 3, print], ids=["str", "int", "function"])
def test_an_args_type_that_is_not_a_class_is_refused_at_registration(args_type: Any) -> None:
    """``@client.task("send_mail")`` (a name, as other queues spell it) was registered with
    the string for args type, and every job of its kind failed decoding its args."""
    with pytest.raises(awa.ValidationError, match=r"^args_type: must be a class"):
        TaskRegistry().register(args_type, lambda job: None, queue="q")


def test_a_string_args_type_is_told_the_kind_keyword() -> None:
    with pytest.raises(awa.ValidationError, match=r"task\(kind='send_mail'\)"):
        awa.AsyncClient("postgresql://unused").task("send_mail")(lambda job: None)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "args_type",
    [dict[str, Any], Mapping[str, Any], MutableMapping[str, Any], Any, Mapping, dict],
    ids=["dict[str, Any]", "Mapping[str, Any]", "MutableMapping", "Any", "Mapping", "dict"],
)
def test_a_type_naming_the_dict_gives_the_handler_the_stored_dict(args_type: Any) -> None:
    """``Mapping[str, Any]`` or ``Any`` typed the handler and was then called to build the
    args: every job of the kind failed decoding them (a review)."""
    task = TaskRegistry().register(args_type, lambda job: None, kind="report", queue="q")
    assert decode_args(task.args_type, {"a": 1}) == {"a": 1}
