"""The blocking twin of :class:`AsyncClient`: same method names, no logic of its own.

Each method is the async one made blocking by the :class:`_blocking` descriptor, which
runs the coroutine on a private event loop (:mod:`awa.client.portal`). A worker started
from here runs on that loop too, so ``start()`` returns at once and jobs run in the
background until ``shutdown()``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
import weakref
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar, overload

from psycopg import AsyncConnection

from awa.client.async_client import AsyncClient
from awa.client.portal import Portal
from awa.client.registering import Registering
from awa.client.transaction import Transaction
from awa.db import forking
from awa.errors import ClientClosed
from awa.types import RuntimeSnapshot

P = ParamSpec("P")
R = TypeVar("R")


class _Bridged(Protocol):
    _portal: Portal
    _core: Any


class _blocking(Generic[P, R]):
    """Descriptor turning an async method of the core object into a blocking one."""

    def __init__(self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> None:
        self._method = method
        self.__doc__ = method.__doc__
        # What introspection (help, inspect.signature, IDEs) shows for a bound call: the
        # async method's parameters without its ``self`` (functools.wraps alone led
        # ``inspect`` back to the unbound function, self included).
        signature = inspect.signature(method)
        self._bound_signature = signature.replace(
            parameters=list(signature.parameters.values())[1:]
        )

        def unbound(owner: _Bridged, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return owner._portal.call(method(owner._core, *args, **kwargs))

        self._unbound: Callable[Concatenate[Any, P], R] = functools.wraps(method)(unbound)

    @overload
    def __get__(self, owner: None, cls: type | None = None) -> Callable[Concatenate[Any, P], R]: ...
    @overload
    def __get__(self, owner: _Bridged, cls: type | None = None) -> Callable[P, R]: ...
    def __get__(
        self, owner: _Bridged | None, cls: type | None = None
    ) -> Callable[Concatenate[Any, P], R] | Callable[P, R]:
        if owner is None:  # looked up on the class: a plain function, as a method is
            return self._unbound
        method, core, portal = self._method, owner._core, owner._portal

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return portal.call(method(core, *args, **kwargs))

        call.__signature__ = self._bound_signature  # type: ignore[attr-defined]
        return call


class SyncTransaction:
    """Blocking face of :class:`~awa.client.transaction.Transaction`."""

    def __init__(self, core: Transaction, portal: Portal) -> None:
        self._core = core
        self._portal = portal

    @property
    def connection(self) -> AsyncConnection[Any]:
        """The async core's psycopg connection (TransactionEnded once the block ended)."""
        return self._core.connection

    execute = _blocking(Transaction.execute)
    fetch_one = _blocking(Transaction.fetch_one)
    fetch_optional = _blocking(Transaction.fetch_optional)
    fetch_all = _blocking(Transaction.fetch_all)
    insert = _blocking(Transaction.insert)
    insert_many = _blocking(Transaction.insert_many)


class Client(Registering):
    """Blocking client: every method of :class:`AsyncClient`, called without ``await``."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        max_connections: int = 10,
        listen_url: str | None = None,
    ) -> None:
        self._core = AsyncClient(
            database_url, max_connections=max_connections, listen_url=listen_url
        )
        self._core._wrong_loop_advice = (
            "this awa.Client's async core (client.async_client) is in use on another event "
            "loop: an awa.Client's blocking calls and a loop of the application's own cannot "
            "share one core; give code that runs its own event loop an awa.AsyncClient"
        )
        self._portal = Portal()
        self._transactions: set[Any] = set()  # open, each between two calls of its thread
        forking.reset_in_child(self)
        # A client collected unclosed (a client per request, never closed) kept its loop
        # thread and a server connection for the life of the process (a review).
        weakref.finalize(self, _collected_unclosed, self._portal, self._core).atexit = False
        self.registry = self._core.registry
        self.database_url = self._core.database_url

    migrate = _blocking(AsyncClient.migrate)
    check_schema = _blocking(AsyncClient.check_schema)
    migration_sql = _blocking(AsyncClient.migration_sql)
    insert = _blocking(AsyncClient.insert)
    insert_many = _blocking(AsyncClient.insert_many)
    get_job = _blocking(AsyncClient.get_job)
    list_jobs = _blocking(AsyncClient.list_jobs)
    list_job_summaries = _blocking(AsyncClient.list_job_summaries)
    cancel = _blocking(AsyncClient.cancel)
    retry = _blocking(AsyncClient.retry)
    cancel_by_unique_key = _blocking(AsyncClient.cancel_by_unique_key)
    retry_failed = _blocking(AsyncClient.retry_failed)
    discard_failed = _blocking(AsyncClient.discard_failed)
    pause_queue = _blocking(AsyncClient.pause_queue)
    resume_queue = _blocking(AsyncClient.resume_queue)
    drain_queue = _blocking(AsyncClient.drain_queue)
    queue_stats = _blocking(AsyncClient.queue_stats)
    explain = _blocking(AsyncClient.explain)
    explain_queue = _blocking(AsyncClient.explain_queue)
    set_runtime_overrides = _blocking(AsyncClient.set_runtime_overrides)
    clear_runtime_overrides = _blocking(AsyncClient.clear_runtime_overrides)
    queue_runtime_overrides = _blocking(AsyncClient.queue_runtime_overrides)
    list_runtime_instances = _blocking(AsyncClient.list_runtime_instances)
    set_queue_limits = _blocking(AsyncClient.set_queue_limits)
    clear_queue_limits = _blocking(AsyncClient.clear_queue_limits)
    queue_limits = _blocking(AsyncClient.queue_limits)
    queue_limits_status = _blocking(AsyncClient.queue_limits_status)
    set_fleet_pool = _blocking(AsyncClient.set_fleet_pool)
    clear_fleet_pool = _blocking(AsyncClient.clear_fleet_pool)
    fleet_pool = _blocking(AsyncClient.fleet_pool)
    start = _blocking(AsyncClient.start)
    shutdown = _blocking(AsyncClient.shutdown)
    wait_stopped = _blocking(AsyncClient.wait_stopped)
    health_check = _blocking(AsyncClient.health_check)
    list_cron_schedules = _blocking(AsyncClient.list_cron_schedules)
    pause_cron = _blocking(AsyncClient.pause_cron)
    resume_cron = _blocking(AsyncClient.resume_cron)
    trigger_cron = _blocking(AsyncClient.trigger_cron)
    remove_cron = _blocking(AsyncClient.remove_cron)
    list_dlq = _blocking(AsyncClient.list_dlq)
    retry_from_dlq = _blocking(AsyncClient.retry_from_dlq)
    purge_dlq = _blocking(AsyncClient.purge_dlq)
    get_dlq_job = _blocking(AsyncClient.get_dlq_job)
    dlq_depth = _blocking(AsyncClient.dlq_depth)
    dlq_depth_by_queue = _blocking(AsyncClient.dlq_depth_by_queue)
    move_failed_to_dlq = _blocking(AsyncClient.move_failed_to_dlq)
    complete_external = _blocking(AsyncClient.complete_external)
    fail_external = _blocking(AsyncClient.fail_external)
    retry_external = _blocking(AsyncClient.retry_external)
    resume_external = _blocking(AsyncClient.resume_external)
    heartbeat_callback = _blocking(AsyncClient.heartbeat_callback)
    preview_batch = _blocking(AsyncClient.preview_batch)
    apply_batch = _blocking(AsyncClient.apply_batch)
    run_batch = _blocking(AsyncClient.run_batch)
    cancel_batch = _blocking(AsyncClient.cancel_batch)
    get_batch = _blocking(AsyncClient.get_batch)
    list_batches = _blocking(AsyncClient.list_batches)

    def _registrar(self) -> AsyncClient:
        return self._core

    @property
    def async_client(self) -> AsyncClient:
        """The async core this client drives, on the client's own event loop: await its
        methods inside this client's async handlers and hooks, where a blocking call would
        wait for itself. One core runs on one loop: code with an event loop of its own (an
        async web endpoint) needs an :class:`AsyncClient` of its own; used there, this core
        and the blocking calls refuse each other (:class:`~awa.errors.WrongEventLoop`)."""
        return self._core

    def runtime_snapshot(self) -> RuntimeSnapshot:
        """See :meth:`AsyncClient.runtime_snapshot`."""
        return self._core.runtime_snapshot()

    @contextmanager
    def transaction(self) -> Iterator[SyncTransaction]:
        """A transaction for the application's SQL and job inserts; commits on success."""
        manager = self._core.transaction()
        tx = self._portal.call(self._enter(manager))
        try:
            yield SyncTransaction(tx, self._portal)
        except BaseException as exc:
            if not self._portal.call(self._exit(manager, exc)):
                raise
        else:
            self._portal.call(self._exit(manager, None))

    # On the loop, as close() is: a transaction is known to it from the moment it opens.
    async def _enter(self, manager: Any) -> Transaction:
        tx: Transaction = await manager.__aenter__()
        self._transactions.add(manager)
        return tx

    async def _exit(self, manager: Any, exc: BaseException | None) -> bool | None:
        try:
            if exc is None:
                return bool(await manager.__aexit__(None, None, None))
            return bool(await manager.__aexit__(type(exc), exc, exc.__traceback__))
        finally:
            self._transactions.discard(manager)

    def _forget_parent(self) -> None:
        """In a forked child: the parent's open transactions are not this process's."""
        self._transactions = set()

    def close(self) -> None:
        """Refuse new calls and cancel those in flight (they raise ClientClosed), roll back
        the transactions other threads hold open, stop the worker if running, close the
        pool and the private loop. Idempotent."""
        self._portal.close(self._close())

    async def _close(self) -> None:
        for manager in list(self._transactions):  # between two calls of another thread
            closed = ClientClosed("this client was closed during the transaction")
            with contextlib.suppress(Exception):  # its connection goes back either way
                await manager.__aexit__(ClientClosed, closed, None)
        await self._core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _collected_unclosed(portal: Portal, core: AsyncClient) -> None:
    """A :class:`Client` was garbage collected without ``close()``: warn, as an unclosed
    file does, and close it without waiting. One whose worker runs is left running: its
    jobs, not the object, are what the application keeps it for."""
    if portal.closed or portal.inherited or core._worker is not None:
        return  # (inherited: the parent's, which the parent closes)
    warnings.warn(
        "an awa.Client was garbage collected without close(): closing it now (use "
        "`with awa.Client(...) as client:` or one client for the process)",
        ResourceWarning,
        stacklevel=1,
    )
    portal.close_soon(core.close())


__all__ = ["Client", "SyncTransaction"]
