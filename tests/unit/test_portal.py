"""The sync client's event-loop thread: a loop that stops on an exception fails every
waiting and later call instead of leaving them blocked for ever."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading

import pytest

from awa.client.portal import Portal
from awa.errors import ClientClosed


def test_a_call_returns_the_coroutines_value() -> None:
    portal = Portal("test-portal")
    try:
        assert portal.call(asyncio.sleep(0, result=42)) == 42
    finally:
        portal.close()


def test_a_loop_stopped_by_system_exit_fails_waiting_and_later_calls() -> None:
    portal = Portal("test-portal")
    started = threading.Event()

    async def long_call() -> None:
        started.set()
        await asyncio.sleep(60)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(portal.call, long_call())
        assert started.wait(10)
        portal.loop.call_soon_threadsafe(sys.exit, "a hook called sys.exit")
        with pytest.raises(ClientClosed, match="event loop stopped"):
            waiting.result(timeout=10)
    with pytest.raises(ClientClosed, match=r"a hook called sys\.exit"):
        portal.call(asyncio.sleep(0))
    portal.close()  # idempotent once dead


def test_a_close_during_which_the_loop_dies_returns() -> None:
    portal = Portal("test-portal")

    async def last() -> None:  # the client's own close, meeting a hook's sys.exit
        portal.loop.call_soon(sys.exit, "a hook called sys.exit")
        await asyncio.sleep(60)

    closing = threading.Thread(target=portal.close, args=(last(),), daemon=True)
    closing.start()
    closing.join(10)
    assert not closing.is_alive()
    with pytest.raises(ClientClosed):
        portal.call(asyncio.sleep(0))
