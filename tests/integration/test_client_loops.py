"""An AsyncClient and the event loops it is used on: a module-level client follows one
``asyncio.run`` to the next; a second loop while the first runs is refused; a closed client
stays closed (as the blocking Client does)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import awa


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
