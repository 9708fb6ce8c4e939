"""``Periodic``: when its next tick runs after one that took long."""

from __future__ import annotations

import pytest

from awa import service
from awa.service import Periodic
from tests.helpers import wait_for

HOUR = 3600.0


class _SlowTicks:
    """Ticks that each appear to take an hour: the clock ``Periodic`` reads moves on by
    that much while one runs (no real wait: the interval is an hour too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        self.ticks = 0
        monkeypatch.setattr(service, "_clock", lambda: self.now)

    async def tick(self) -> None:
        self.ticks += 1
        self.now += HOUR


async def _ticked_twice(periodic: Periodic, slow: _SlowTicks) -> bool:
    async def twice() -> bool:
        return slow.ticks >= 2

    periodic.start()
    try:
        await wait_for(twice, timeout=2)
        return True
    except AssertionError:
        return False
    finally:
        await periodic.stop()


async def test_at_a_fixed_rate_a_tick_as_long_as_the_interval_is_followed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The heartbeat's: a beat that answered slowly delayed the next by a whole interval,
    and slow-but-answering beats stopped handlers of a healthy worker (ADR 0055)."""
    slow = _SlowTicks(monkeypatch)
    assert await _ticked_twice(Periodic("beat", HOUR, slow.tick, fixed_rate=True), slow)


async def test_by_default_the_interval_runs_from_a_ticks_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = _SlowTicks(monkeypatch)
    assert not await _ticked_twice(Periodic("sweep", HOUR, slow.tick), slow)
    assert slow.ticks == 1
