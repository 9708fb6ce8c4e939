"""A pool whose server was gone for a while comes back with it, and says why it had no
connection meanwhile. The server's absence is a proxy in front of it that drops every
connection and refuses new ones, as a stopped server does (``FreezableProxy.down``)."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import pytest
from psycopg_pool.base import AttemptWithBackoff

import awa
from awa.db import pool as pool_module
from tests.chaos.partition import FreezableProxy
from tests.helpers import wait_for


async def test_a_long_outage_does_not_stretch_the_pools_wait_past_its_cap(
    proxy: FreezableProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg_pool doubled its wait between reconnect attempts without bound: after a
    minute's outage a warm client failed every call for up to a minute more with the
    server back (a review). Time is scaled down here: attempts 0.1 s apart at first,
    capped at 0.2 s; 3.5 s down leaves psycopg_pool's own next attempt 2.8 s after the
    server is back, the capped one at most 0.2 s."""
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.1)
    monkeypatch.setattr(pool_module, "RECONNECT_DELAY_MAX_S", 0.2)
    client = awa.AsyncClient(proxy.url)
    client.pool_timeout_s = 0.5
    try:
        await client.migrate()
        proxy.down()
        with pytest.raises(awa.DatabaseError, match="the last attempt to connect failed"):
            await client.insert({}, kind="k")  # a call during the outage: the pool retries
        await asyncio.sleep(3.5)  # the outage's length, not a synchronisation
        proxy.up()

        async def served() -> bool:
            with suppress(awa.DatabaseError):
                await client.insert({}, kind="k")
                return True
            return False

        await wait_for(served, timeout=1.5, interval=0.05)
    finally:
        await client.close()
