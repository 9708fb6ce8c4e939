"""How a dispatcher reads the fleet's holds (ADR 0038): what wakes it while held back."""

from __future__ import annotations

import time

from awa.config import QueueConfig
from awa.db.lane import ConnectionLane
from awa.db.rows import FleetHold
from awa.worker.control import QueueControl
from awa.worker.dispatcher import Dispatcher
from awa.worker.permits import QueuePermits


def _dispatcher() -> Dispatcher:
    # A dispatcher's wake-up logic needs no database: the pool and executor go unused.
    control = QueueControl(QueueConfig("a", max_workers=8))
    return Dispatcher(
        "a",
        None,  # type: ignore[arg-type]
        QueuePermits("a", 8),
        control,
        None,  # type: ignore[arg-type]
        claim_lane=ConnectionLane(),
    )


def _woken(dispatcher: Dispatcher) -> bool:
    woken = dispatcher._wakeup.is_set()
    dispatcher._wakeup.clear()
    return woken


def test_a_process_at_its_pool_part_ignores_slots_freed_elsewhere() -> None:
    dispatcher = _dispatcher()
    dispatcher._held_back(FleetHold("pool_part", None))
    # Reported as a pool hold (explain, metrics and snapshots know only that reason)...
    assert dispatcher.blocked == "pool"
    assert dispatcher.at_pool_part
    # ...but a slot freed by another process cannot raise this process's part.
    dispatcher.wake_freed()
    assert not _woken(dispatcher)
    # New jobs cannot either; its own completions re-fill its part by riding.
    dispatcher.wake_available()
    assert not _woken(dispatcher)


def test_a_member_without_room_claims_again_when_a_slot_is_freed() -> None:
    dispatcher = _dispatcher()
    dispatcher._held_back(FleetHold("pool", None))
    assert dispatcher.blocked == "pool" and not dispatcher.at_pool_part
    dispatcher.wake_freed()
    assert _woken(dispatcher)


def test_a_claim_without_a_hold_clears_the_part() -> None:
    dispatcher = _dispatcher()
    dispatcher._held_back(FleetHold("pool_part", None))
    dispatcher._held_back(None)
    assert dispatcher.blocked is None and not dispatcher.at_pool_part
    dispatcher.wake_freed()
    assert _woken(dispatcher)


def test_a_control_change_forgets_the_hold_and_its_wait() -> None:
    dispatcher = _dispatcher()
    dispatcher._held_back(FleetHold("rate", 50_000.0))  # the next token in 50 s
    assert dispatcher._reserve() is None  # not asking before then
    dispatcher.wake_available()
    assert not _woken(dispatcher)
    # An operator raises the limit: the old token's time no longer stands.
    dispatcher.control_changed()
    assert _woken(dispatcher) and dispatcher.blocked is None
    assert dispatcher._reserve() is not None


def test_a_shorter_poll_interval_reaches_an_idle_queues_next_probe() -> None:
    dispatcher = _dispatcher()
    told: list[bool] = []
    dispatcher.watch_idle(lambda: told.append(True))
    dispatcher.idle, dispatcher.probe_due = True, time.monotonic() + 30  # started at 30 s
    dispatcher.control.poll_interval_ms = 200  # what an override applied sets
    dispatcher.control_changed()
    assert dispatcher.probe_due <= time.monotonic() + 0.2
    assert told == [True]  # the prober recomputes its next wake-up
