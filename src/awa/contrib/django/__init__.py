"""Django integration: ``INSTALLED_APPS += ["awa.contrib.django"]``.

- ``enqueue(args, **options)`` inserts through the Django connection, inside the current
  ``transaction.atomic()`` block if there is one: the job exists only if the block
  commits, and ``transaction.on_commit(lambda: enqueue(...))`` runs after it did.
  ``aenqueue`` is the same for async views.
- ``@task(ArgsType, queue="email")`` registers a handler, from each app's ``tasks.py``
  (imported at start-up). Plain handlers get fresh database connections like a request.
- ``manage.py migrate`` applies awa's schema; ``manage.py awa_worker`` runs the handlers
  with the flags of ``awa worker``; ``include("awa.contrib.django.urls")`` adds a
  read-only queues page for staff, linking to ``awa serve`` when ``DASHBOARD_URL`` is set.

Settings live in ``settings.AWA`` (:mod:`awa.contrib.django.conf`). See
``docs/integrations/django.md``.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar, Unpack, overload

from awa.bridge import insert_job
from awa.client.async_client import AsyncClient
from awa.client.insert import InsertOptions
from awa.client.registering import A, H, R
from awa.config import DEFAULT_QUEUE
from awa.contrib.django import conf
from awa.extras import require
from awa.types import Job, StoredJob
from awa.worker.registry import TaskRegistry

require("django", "awa.contrib.django")  # Django itself is imported where it is used

F = TypeVar("F", bound=Callable[..., Any])

# Handlers register here at import time, long before a client (and its database URL,
# which Django's test runner may still change) is needed.
registry = TaskRegistry()
_client: AsyncClient | None = None
_client_lock = threading.Lock()


def get_client() -> AsyncClient:
    """The process's :class:`awa.AsyncClient` for this project (made on first use), with
    every ``@task`` registered. ``manage.py awa_worker`` runs it."""
    global _client
    with _client_lock:
        if _client is None:
            settings = conf.current()
            url = settings.database_url or conf.database_url(settings.database)
            client = AsyncClient(
                url, max_connections=settings.max_connections, listen_url=settings.listen_url
            )
            client.registry = registry
            _client = client
        return _client


@overload
def task(
    args_type: type[A], *, queue: str = DEFAULT_QUEUE, kind: str | None = None
) -> Callable[[Callable[[Job[A]], R]], Callable[[Job[A]], R]]: ...


@overload
def task(args_type: None = None, *, queue: str = DEFAULT_QUEUE, kind: str) -> Callable[[H], H]: ...


def task(
    args_type: type[Any] | None = None, *, queue: str = DEFAULT_QUEUE, kind: str | None = None
) -> Callable[[Any], Any]:
    """Register a handler, as ``client.task``. A plain (sync) handler runs with Django's
    connection housekeeping around it, as a request does, so a long-lived worker never
    reuses a connection the server closed."""

    def register(handler: F) -> F:
        run = handler if inspect.iscoroutinefunction(handler) else _with_fresh_connections(handler)
        registry.register(args_type, run, kind=kind, queue=queue)
        return handler

    return register


def _with_fresh_connections(handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
    from django.db import close_old_connections

    @functools.wraps(handler)
    def run(job: Any) -> Any:
        close_old_connections()
        try:
            return handler(job)
        finally:
            close_old_connections()

    return run


def enqueue(args: Any, *, using: str | None = None, **options: Unpack[InsertOptions]) -> StoredJob:
    """Insert a job through Django's connection ``using`` (default ``AWA['DATABASE']``),
    in its current transaction. Options as ``client.insert``; ``queue`` defaults to the
    queue the args type's task was registered on."""
    from django.db import connections

    connection = connections[using or conf.current().database]
    connection.ensure_connection()
    options["kind"], options["queue"] = registry.job_defaults(
        args, options.get("kind"), options.get("queue")
    )
    job = insert_job(connection.connection, args, **options)
    assert isinstance(job, Job)  # a sync psycopg connection inserts synchronously
    return job


async def aenqueue(
    args: Any, *, using: str | None = None, **options: Unpack[InsertOptions]
) -> StoredJob:
    """:func:`enqueue` for async code: runs on Django's thread for database work, so it
    joins the same transaction as the ORM calls around it."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(enqueue)(args, using=using, **options)


__all__ = ["aenqueue", "enqueue", "get_client", "registry", "task"]
