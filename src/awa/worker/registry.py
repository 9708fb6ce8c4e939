"""Task registration: which handler runs which job kind."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, get_origin

from awa import validate
from awa.config import DEFAULT_QUEUE
from awa.errors import ValidationError
from awa.kinds import derive_kind

Handler = Callable[[Any], Any]


def _is_async(handler: Handler) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


@dataclass(frozen=True, slots=True)
class Task:
    """One registered handler."""

    kind: str
    args_type: type[Any] | None  # what the stored args are built into; None: the dict itself
    handler: Handler
    is_async: bool
    queue: str


class TaskRegistry:
    """Kinds → tasks. Registration happens before ``start()``; lookups are lock-free."""

    def __init__(self) -> None:
        self._by_kind: dict[str, Task] = {}
        self._queue_by_type: dict[type[Any], str] = {}
        self._kind_by_type: dict[type[Any], str] = {}

    def register(
        self,
        args_type: type[Any] | None,
        handler: Handler,
        *,
        kind: str | None = None,
        queue: str = "default",
    ) -> Task:
        """Register ``handler`` for ``kind`` (derived from ``args_type`` when omitted)."""
        if not callable(handler):
            raise ValidationError("handler", f"must be callable, got {type(handler).__name__}")
        if inspect.isasyncgenfunction(handler) or inspect.isgeneratorfunction(handler):
            raise ValidationError("handler", "must be a plain or async function, not a generator")
        _check_takes_one_job(handler)
        _check_args_type(args_type)
        if kind is None:
            if args_type is None or args_type is dict:
                raise ValidationError("kind", "is required when the args type is dict or None")
            kind = derive_kind(args_type)
        kind = validate.name("kind", kind)
        queue = validate.name("queue", queue)
        if kind in self._by_kind:
            raise ValidationError("kind", f"a handler for {kind!r} is already registered")
        built = None if _names_the_dict(args_type) else args_type
        task = Task(kind, built, handler, _is_async(handler), queue)
        self._by_kind[kind] = task
        if args_type is not None and args_type is not dict:
            # The first task registered for a type gives its jobs both kind and queue.
            self._queue_by_type.setdefault(args_type, queue)
            self._kind_by_type.setdefault(args_type, kind)
        return task

    def get(self, kind: str) -> Task | None:
        """The task for ``kind``, or None when no handler is registered."""
        return self._by_kind.get(kind)

    def job_defaults(
        self, args: Any, kind: str | None, queue: str | None
    ) -> tuple[str | None, str]:
        """The kind and queue of a job of ``args`` where the call named none: those of
        the task registered for its args type (dict args: the queue of their kind's task),
        else the kind derived later from the type, and ``default``. Every insert path asks
        here."""
        if kind is None and not isinstance(args, Mapping):
            kind = self.default_kind(type(args))
        elif kind is not None and not isinstance(kind, str):  # a dict key below: a list
            validate.text("kind", kind)  # would be a TypeError; raises (strings: checked later)
        if queue is None:
            queue = self.default_queue(type(args), kind) or DEFAULT_QUEUE
        return kind, queue

    def default_kind(self, args_type: type[Any]) -> str | None:
        """The kind a job of ``args_type`` gets when none is named: that of the (first)
        task registered for the type, if any — ``@client.task(SendMail, kind="mail")``
        then ``client.insert(SendMail(...))`` is a ``mail`` job."""
        return self._kind_by_type.get(args_type)

    def default_queue(self, args_type: type[Any], kind: str | None) -> str | None:
        """Where a job goes when no queue is named: the queue of the task registered for
        its args type, else for its kind (how dict args name their task), if any."""
        queue = self._queue_by_type.get(args_type)
        if queue is None and kind is not None and (task := self._by_kind.get(kind)):
            queue = task.queue
        return queue

    def queues(self) -> list[str]:
        """Queues named by registered tasks, in registration order, without repeats."""
        return list(dict.fromkeys(task.queue for task in self._by_kind.values()))

    def tasks(self) -> list[Task]:
        """Every registered task, in registration order."""
        return list(self._by_kind.values())

    def unserved(self, served: Iterable[str]) -> list[Task]:
        """Tasks whose queue is not among ``served``: their jobs would wait for another
        process (or forever, when a queue name was mistyped)."""
        names = set(served)
        return [task for task in self._by_kind.values() if task.queue not in names]

    def __len__(self) -> int:
        return len(self._by_kind)


def _names_the_dict(args_type: object) -> bool:
    """Whether ``args_type`` only types the handler's args as the stored dict (``dict``,
    ``dict[str, Any]``, ``Mapping[str, Any]``, ``Any``): built by calling it, every job
    of the kind failed (``Mapping(**args)`` cannot be; a review)."""
    if args_type is None or args_type is Any:
        return True
    origin = get_origin(args_type) or args_type
    return origin is dict or origin in (Mapping, MutableMapping)


def _check_args_type(args_type: object) -> None:
    """Refuse an args type that is not a class: ``@client.task("send_mail")``, as other
    queues spell a name, registered the kind ``send_mail`` with a string for args type,
    and every job of it then failed on decoding its args (a review)."""
    if args_type is None or isinstance(args_type, type):
        return
    if isinstance(get_origin(args_type), type):  # dict[str, Any], to type the handler
        return
    if isinstance(args_type, str):
        raise ValidationError(
            "args_type",
            f"must be a class, got the string {args_type!r}: to register a handler by "
            f"kind name, write task(kind={args_type!r})",
        )
    raise ValidationError("args_type", f"must be a class or None, got {args_type!r}")


def _check_takes_one_job(handler: Handler) -> None:
    """Refuse a handler that cannot be called with the job alone: accepted, every job of
    its kind failed with a TypeError and was retried to its last attempt (a review:
    handlers from an untyped table, which no type checker saw)."""
    try:
        # The wrapper's own parameters: a functools.wraps decorator that supplies more
        # (a session, a container) is called with the job alone (a review).
        signature = inspect.signature(handler, follow_wrapped=False)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        raise ValidationError(
            "handler", f"must take one argument, the awa.Job: {_name(handler)} cannot ({exc})"
        ) from None


def _name(handler: Handler) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))
