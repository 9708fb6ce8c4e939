"""An AsyncClient and the event loops it is used on: a module-level client follows one
``asyncio.run`` to the next; a second loop while the first runs is refused; a closed client
stays closed (as the blocking Client does)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from typing import Any

import psycopg
import pytest

import awa
from tests.helpers import wait_until


def test_a_module_level_client_follows_asyncio_run_to_the_next(database_url: str) -> None:
    client = awa.AsyncClient(database_url, max_connections=3)
    client.pool_timeout_s = 5  # before: a call needing a new connection waited 30 s, failed
    asyncio.run(client.insert({}, kind="k"))

    async def second() -> list[awa.QueueStat]:
        async with client.transaction() as tx:  # holds one connection: the next needs more
            await tx.insert({}, kind="k")
            return await client.queue_stats()

    asyncio.run(second())
    assert len(asyncio.run(client.list_jobs(kind="k"))) == 2
    asyncio.run(client.close())
    asyncio.run(client.close())  # idempotent
    with pytest.raises(awa.ClientClosed):
        asyncio.run(client.insert({}, kind="k"))  # not a new pool behind close()'s back


def test_each_asyncio_run_leaves_no_connection_behind(database_url: str) -> None:
    """A module-level client dropping the pool of a closed loop: its connections were
    never collected (held by the direct statements' per-connection state), one server
    connection left per asyncio.run until the server refused more (a review)."""
    client = awa.AsyncClient(database_url)
    gc.disable()  # closed when the pool is dropped, not when a full collection runs
    try:
        for i in range(30):
            asyncio.run(client.insert({"i": i}, kind="k"))
        with psycopg.connect(database_url, autocommit=True) as db:

            def backends() -> int:
                row = db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                ).fetchone()
                return row[0] if row else 0

            # The last pool's (min 1), not one per run; the server ends a backend once
            # its client is gone.
            wait_until(lambda: backends() <= 2)
    finally:
        gc.enable()
        asyncio.run(client.close())


def test_a_clients_core_on_the_applications_loop_says_it_is_the_clients(
    database_url: str,
) -> None:
    """Told "use awa.Client from other threads" while doing just that (a review): the
    blocking calls and the application's loop cannot share the core, and it says so."""
    with awa.Client(database_url) as client:
        client.insert({}, kind="k")  # the core now runs on the client's own loop
        with pytest.raises(awa.WrongEventLoop, match=r"client\.async_client"):
            asyncio.run(client.async_client.insert({}, kind="k"))
        assert len(client.list_jobs(kind="k")) == 1


def test_a_second_loop_while_the_first_runs_is_refused(database_url: str) -> None:
    client = awa.AsyncClient(database_url)
    first = asyncio.new_event_loop()
    thread = threading.Thread(target=first.run_forever, daemon=True)
    thread.start()

    def on_first(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, first).result(timeout=30)

    try:
        on_first(client.insert({}, kind="k"))
        with pytest.raises(awa.WrongEventLoop, match="one client per event loop"):
            asyncio.run(client.insert({}, kind="k"))
        assert len(on_first(client.list_jobs(kind="k"))) == 1  # the first loop's goes on
    finally:
        on_first(client.close())
        first.call_soon_threadsafe(first.stop)
        thread.join(timeout=30)
        first.close()


def test_threads_each_running_a_loop_get_wrong_event_loop_never_a_hang(
    database_url: str,
) -> None:
    """A module-level AsyncClient used by threads that each ``asyncio.run`` their call (a
    threaded WSGI app): each call either runs or is refused with WrongEventLoop. Calls
    that passed the loop check at once waited on another loop's lock or pool for ever, or
    failed with asyncio's "bound to a different event loop" (a review)."""
    client = awa.AsyncClient(database_url, max_connections=3)
    outcomes: list[str] = []
    lock = threading.Lock()

    async def insert_bounded(i: int) -> None:
        await asyncio.wait_for(client.insert({"i": i}, kind="threaded"), timeout=20)

    def requests() -> None:
        for i in range(30):
            try:
                asyncio.run(insert_bounded(i))
                outcome = "ok"
            except awa.WrongEventLoop:
                outcome = "refused"
            except BaseException as exc:  # a hang ends in TimeoutError here
                outcome = f"{type(exc).__name__}: {exc}"
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=requests, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert not any(thread.is_alive() for thread in threads)
        assert len(outcomes) == 240
        assert set(outcomes) <= {"ok", "refused"}, sorted(set(outcomes) - {"ok", "refused"})
        assert "ok" in outcomes
        inserted = asyncio.run(client.list_jobs(kind="threaded", limit=1000))
        assert len(inserted) == outcomes.count("ok")
    finally:
        asyncio.run(client.close())


async def test_a_first_call_cancelled_while_the_pool_opens_leaves_no_pool_running(
    database_url: str,
) -> None:
    """The half-opened pool of a cancelled first call was never closed: its worker tasks
    ran on, each reported "Task was destroyed but it is pending!" later (a review)."""
    client = awa.AsyncClient(database_url)
    cancelled = 0
    try:
        for delay in [i * 0.002 for i in range(1, 40)]:  # sweeps the pool's opening
            call = asyncio.create_task(client.queue_stats())
            await asyncio.sleep(delay)
            if not call.done():
                call.cancel()
                cancelled += 1
            with contextlib.suppress(asyncio.CancelledError, awa.AwaError):
                await call
            if client._pool is not None:
                break
            assert _pool_workers() == [], f"after a cancel {delay * 1000:.0f} ms in"
        assert cancelled > 0
    finally:
        await client.close()


def _pool_workers() -> list[asyncio.Task[Any]]:
    return [
        t for t in asyncio.all_tasks() if t.get_name().startswith("awa-worker") and not t.done()
    ]
