"""What is registered before ``start()`` — handlers (``task``), periodic jobs and
lifecycle hooks — written once for both clients, typed so that a checker sees what a
handler or a hook receives. Each method acts on ``self._registrar()``: the
:class:`~awa.client.async_client.AsyncClient` itself, or the one a sync ``Client`` drives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from awa.client import cron
from awa.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from awa.hooks import (
    Callback,
    Hooks,
    JobCancelled,
    JobCompleted,
    JobEvent,
    JobExhausted,
    JobRetried,
    JobStarted,
)
from awa.periodic import PeriodicJob
from awa.types import Job

if TYPE_CHECKING:
    from awa.client.async_client import AsyncClient

A = TypeVar("A")  # a task's args type
R = TypeVar("R")  # what its handler returns (a coroutine for an async one)
H = TypeVar("H", bound=Callable[[Job[Any]], object])  # a handler registered by kind
F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=JobEvent)
_Kind = str | type[Any] | None  # job_kind: a kind, or an args type whose kind it is


class Registering:
    """``task``, ``periodic`` and ``on_event`` (mixed into both clients)."""

    # The AsyncClient that holds the registry: itself, or the one a sync Client drives
    # (each client defines it).
    _registrar: Callable[[], AsyncClient]

    def __reduce__(self) -> Any:
        # Passed to a process pool, a client failed deep in pickle ("cannot pickle
        # '_asyncio.Task' object"): it holds connections, tasks and a thread.
        raise TypeError(
            f"an awa.{type(self).__name__} cannot be pickled: make one in each process "
            "(a module-level client is made again when a spawned process imports it)"
        )

    # Typed so a checker sees the handler take an awa.Job of args_type: a handler of
    # another args type, or of none, is an error before it ever runs.
    @overload
    def task(
        self, args_type: type[A], *, queue: str = DEFAULT_QUEUE, kind: str | None = None
    ) -> Callable[[Callable[[Job[A]], R]], Callable[[Job[A]], R]]: ...

    @overload
    def task(
        self, args_type: None = None, *, queue: str = DEFAULT_QUEUE, kind: str
    ) -> Callable[[H], H]: ...

    def task(
        self,
        args_type: type[Any] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        kind: str | None = None,
    ) -> Callable[[Any], Any]:
        """Decorator registering an async or plain handler for ``args_type``'s kind."""
        registry = self._registrar().registry

        def register(handler: F) -> F:
            registry.register(args_type, handler, kind=kind, queue=queue)
            return handler

        return register

    def periodic(
        self,
        name: str,
        cron_expr: str,
        args: Any,
        *,
        kind: str | None = None,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        missed_fire_policy: str = "coalesce",
    ) -> PeriodicJob:
        """Register a periodic job before ``start()``: enqueue ``args`` on ``cron_expr``.

        ``cron_expr`` has 5 fields (minute hour day month weekday) or 6 (seconds first),
        evaluated in the IANA ``timezone``. The maintenance leader fires each schedule
        exactly once per fire time across the fleet. ``missed_fire_policy`` decides what
        happens after downtime: ``"coalesce"`` (one job) or ``"catch_up"`` (one per miss).
        Invalid values raise ValidationError naming the field.
        """
        core = self._registrar()
        core._before_start("periodic")
        spec = core._spec(
            args,
            kind=kind,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            tags=tags,
            metadata=metadata,
        )
        job = cron.build(name, cron_expr, timezone, missed_fire_policy, spec)
        cron.check_unique(core._periodic, job.name)
        core._periodic.append(job)
        return job

    # Typed per event, so a checker sees what the callback receives: a callback taking
    # a Job (not the event) is an error before it is ever called.
    @overload
    def on_event(
        self, kind_or_type: type[E], callback: Callable[[E], object], *, job_kind: _Kind = None
    ) -> None: ...
    @overload
    def on_event(
        self,
        kind_or_type: Literal["started"],
        callback: Callable[[JobStarted], object],
        *,
        job_kind: _Kind = None,
    ) -> None: ...
    @overload
    def on_event(
        self,
        kind_or_type: Literal["completed"],
        callback: Callable[[JobCompleted], object],
        *,
        job_kind: _Kind = None,
    ) -> None: ...
    @overload
    def on_event(
        self,
        kind_or_type: Literal["retried"],
        callback: Callable[[JobRetried], object],
        *,
        job_kind: _Kind = None,
    ) -> None: ...
    @overload
    def on_event(
        self,
        kind_or_type: Literal["exhausted"],
        callback: Callable[[JobExhausted], object],
        *,
        job_kind: _Kind = None,
    ) -> None: ...
    @overload
    def on_event(
        self,
        kind_or_type: Literal["cancelled"],
        callback: Callable[[JobCancelled], object],
        *,
        job_kind: _Kind = None,
    ) -> None: ...
    @overload
    def on_event(
        self, kind_or_type: str, callback: Callable[[JobEvent], object], *, job_kind: _Kind = None
    ) -> None: ...
    def on_event(
        self,
        kind_or_type: str | type[JobEvent],
        callback: Callback,
        *,
        job_kind: str | type[Any] | None = None,
    ) -> None:
        """Call ``callback(event)`` after ``started``, ``completed``, ``retried``,
        ``exhausted`` or ``cancelled`` commits (``"*"`` for all; or an event class such as
        ``awa.hooks.JobCompleted``), optionally only for jobs of ``job_kind``.

        Register before ``start()``. Plain callbacks run inline on the worker loop, async
        ones as tasks; a failing hook is logged and never affects the job.
        """
        core = self._registrar()
        core._before_start("on_event")
        if core._hooks is None:
            core._hooks = Hooks()
            core._observers.append(core._hooks)
        if isinstance(job_kind, type):  # its task's kind, when registered (as inserts use)
            job_kind = core.registry.default_kind(job_kind) or job_kind
        core._hooks.subscribe(kind_or_type, callback, job_kind=job_kind)
