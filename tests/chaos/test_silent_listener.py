"""A LISTEN connection that goes silent without closing (a NAT dropping an idle flow, a
partition, a proxy that stopped forwarding) while the worker's pool still works.

The worker kept parking handoff seats that producers filled and whose notices never came:
each such seat kept its permit for good, and a queue of 4 ran 1 job at a time, its health
"ready" (a review). Two mends, each tested alone: the listener probes its connection and
makes it again when it does not answer (its seats come back meanwhile), and a seat that
two renewals in a row do not find gives its permit back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import awa
from awa.worker import listener, seats
from tests.chaos.partition import FreezableProxy
from tests.helpers import FAST_WORKER, wait_for

pytestmark = pytest.mark.chaos

PERMITS = 4


async def _all_permits_run(
    client: awa.AsyncClient, together: asyncio.Event, handed: int = 0
) -> None:
    """Insert ``handed`` jobs (taken by seats) and as many more as the queue has permits,
    one by one as producers do, and wait until as many run at once as there are permits."""
    for i in range(handed + PERMITS):
        await client.insert({"i": i}, kind="k", queue="q")
    await asyncio.wait_for(together.wait(), timeout=30)


async def _start(client: awa.AsyncClient) -> asyncio.Event:
    running = 0
    together = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        nonlocal running
        running += 1
        if running == PERMITS:
            together.set()
        await together.wait()
        running -= 1

    await client.start([("q", PERMITS)], **{**FAST_WORKER, "handoff_seats": 3})
    worker = client._worker

    async def seated() -> bool:
        return worker.listener.connected and worker.seater.parked().get("q", 0) == 3

    await wait_for(seated, timeout=30)
    return together


async def test_a_silent_listen_connection_is_made_again(
    database_url: str, proxy: FreezableProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener, "PROBE_EVERY_S", 0.3)
    monkeypatch.setattr(listener, "PROBE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(seats, "RENEW_EVERY_S", 3600.0)  # only the probe can mend it
    client = awa.AsyncClient(database_url, listen_url=proxy.url)
    try:
        together = await _start(client)
        proxy.freeze()
        worker = client._worker

        async def noticed() -> bool:
            return not worker.listener.connected and not worker.seater.parked()

        await wait_for(noticed, timeout=30)
        await _all_permits_run(client, together)
        proxy.thaw()

        async def reconnected() -> bool:
            return worker.listener.connected

        await wait_for(reconnected, timeout=30)
    finally:
        proxy.thaw()
        await client.shutdown(timeout_ms=2_000)
        await client.close()


async def test_a_seat_whose_notice_never_came_gives_its_permit_back(
    database_url: str, proxy: FreezableProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener, "PROBE_EVERY_S", 3600.0)  # only the renewals can mend it
    monkeypatch.setattr(seats, "RENEW_EVERY_S", 0.2)
    client = awa.AsyncClient(database_url, listen_url=proxy.url)
    try:
        together = await _start(client)
        proxy.freeze()
        # The first three are handed to the seats, their notices held in the proxy.
        await _all_permits_run(client, together, handed=3)
    finally:
        proxy.thaw()
        await client.shutdown(timeout_ms=2_000)
        await client.close()
