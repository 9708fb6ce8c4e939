"""How a dispatcher reads the fleet's holds (ADR 0038): what wakes it while held back."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from awa.config import QueueConfig
from awa.db.lane import ConnectionLane
from awa.db.rows import FleetHold
from awa.types import Job, JobState, QueueLimits
from awa.worker.control import QueueControl
from awa.worker.dispatcher import Dispatcher
from awa.worker.permits import QueuePermits
from awa.worker.rate_limit import TokenBucket


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


def test_a_poll_granted_no_permit_waits_for_permits_riding_not_idle() -> None:
    """Polled with work in sight (the idle prober, a notice) but every permit taken: it
    stayed idle, so the freed permits went to the claims riding on the writes of the
    queues beside it and a weighted queue ran almost nothing (a review)."""
    dispatcher = _dispatcher()
    dispatcher._write_pending = lambda: True
    grant = dispatcher.permits.try_acquire(8)  # another claim holds them all
    assert dispatcher.idle and dispatcher.rides_on_writes  # rides only when not idle
    assert dispatcher._reserve() is None
    assert not dispatcher.idle
    dispatcher.permits.release(grant)
    assert not _woken(dispatcher)  # the write's riding claim takes the permit


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


class _Launcher:
    """Stands in for the executor: records the jobs a claim launched."""

    def __init__(self) -> None:
        self.launched: list[int] = []

    def launch(self, job: Job[Any], *_: Any) -> None:
        self.launched.append(job.id)


def _claimed(job_id: int) -> Job[Any]:
    now = datetime.now(UTC)
    return Job(
        id=job_id, kind="k", queue="a", args={}, state=JobState.RUNNING, priority=2,
        attempt=1, max_attempts=3, run_lease=1, tags=[], metadata={}, progress=None,
        errors=[], created_at=now, run_at=now, attempted_at=now, deadline_at=None,
        finalized_at=None,
    )  # fmt: skip


def test_a_claim_the_token_bucket_cut_polls_again_with_the_next_token() -> None:
    """Rate 50/s, burst 1, polls a second apart: the bucket, not the work, ends each
    claim, so the next poll is due with the next token (20 ms), not a second later —
    else 49 of every 50 tokens overflow the burst unused."""
    config = QueueConfig("a", max_workers=8, rate_limit=(50.0, 1), poll_interval_ms=1_000)
    launcher = _Launcher()
    control = QueueControl(config, TokenBucket(50.0, 1))  # as the worker builds it
    dispatcher = Dispatcher(
        "a", None, QueuePermits("a", 8), control, launcher,  # type: ignore[arg-type]
        claim_lane=ConnectionLane(),
    )  # fmt: skip
    reservation = dispatcher._reserve()
    assert reservation is not None and reservation.limit == 1  # one token for 8 permits
    dispatcher._settle(reservation, [_claimed(1)], None, [16])
    assert launcher.launched == [1] and not dispatcher.idle
    wait = dispatcher._sleep_seconds()
    assert wait is not None and wait <= 1 / 50
    assert dispatcher._reserve() is None  # no token yet: the same wait, not a poll interval
    wait = dispatcher._sleep_seconds()
    assert wait is not None and wait <= 1 / 50


def test_a_fleet_rate_hold_asks_again_with_the_fleets_next_token_not_a_poll_later() -> None:
    """Fleet rate 20/s, burst 2, polls 200 ms apart: waiting max(poll, next token) ran
    2 jobs per poll, 10/s. The fleet said when its next token comes: ask then."""
    dispatcher = _dispatcher()
    dispatcher.idle = False
    dispatcher._held_back(FleetHold("rate", 50.0))  # the fleet's next token in 50 ms
    wait = dispatcher._sleep_seconds()
    assert wait is not None and wait <= 0.05
    dispatcher._held_back(FleetHold("concurrency", None))  # other holds: at least a poll
    assert dispatcher._sleep_seconds() == dispatcher.control.poll_sleep_s


def _fleet_rate(dispatcher: Dispatcher, rate: float, burst: int) -> None:
    dispatcher.control.limits = QueueLimits("a", None, rate, burst, None, datetime.now(UTC))


def test_a_fleet_rate_hold_waits_until_the_bucket_could_fill_a_claim_not_each_token() -> None:
    """Rate 50/s, burst 50, polls 200 ms apart: asking at every token made every worker
    claim 50 times a second for one job each; a poll later the bucket still has room."""
    dispatcher = _dispatcher()
    dispatcher.idle = False
    _fleet_rate(dispatcher, 50.0, 50)
    dispatcher._held_back(FleetHold("rate", 20.0))
    assert dispatcher._sleep_seconds() == dispatcher.control.poll_sleep_s
    _fleet_rate(dispatcher, 20.0, 2)  # a small burst fills before a poll: ask as it does
    dispatcher._held_back(FleetHold("rate", 50.0))
    wait = dispatcher._sleep_seconds()
    assert wait is not None and 0.05 <= wait <= 0.1 + 0.01


def test_a_hold_whose_time_passed_without_a_claim_waits_a_poll_not_a_spin() -> None:
    """The token came while no permit was free (another queue held the overflow): a
    permit's return wakes the dispatcher, not a timeout of zero over and over."""
    dispatcher = _dispatcher()
    dispatcher.idle = False
    for hold in (FleetHold("rate", 10.0), FleetHold("partition", -10.0)):
        dispatcher._held_back(hold)
        dispatcher._not_before = dispatcher._key_token_at = time.monotonic() - 1
        assert dispatcher._sleep_seconds() == dispatcher.control.poll_sleep_s


def test_a_partition_hold_looks_again_when_a_keys_next_token_comes() -> None:
    dispatcher = _dispatcher()
    dispatcher.idle = False
    dispatcher._held_back(FleetHold("partition", -30.0))  # a key's next token in 30 ms
    wait = dispatcher._sleep_seconds()
    assert wait is not None and wait <= 0.03
    assert dispatcher._reserve() is None  # not asked again at once (a burst of notices)...
    dispatcher._not_before = 0.0  # ...but a new key's job may be claimed before then
    assert dispatcher._reserve() is not None
    dispatcher._held_back(FleetHold("partition", None))  # only caps: a poll, or `freed`
    assert dispatcher._sleep_seconds() == dispatcher.control.poll_sleep_s


def test_no_poll_sleeps_longer_than_the_control_refresh_cadence() -> None:
    control = QueueControl(QueueConfig("a", poll_interval_ms=30_000), refresh_ms=1_000)
    assert control.poll_sleep_s == 1.0  # CONTRACT §5
    control.poll_interval_ms = 200
    assert control.poll_sleep_s == 0.2


def test_a_token_bound_queue_without_a_free_permit_waits_a_poll_not_each_token() -> None:
    config = QueueConfig("a", max_workers=1, rate_limit=(1000.0, 1), poll_interval_ms=200)
    control = QueueControl(config, TokenBucket(1000.0, 1))
    dispatcher = Dispatcher(
        "a", None, QueuePermits("a", 1), control, _Launcher(),  # type: ignore[arg-type]
        claim_lane=ConnectionLane(),
    )  # fmt: skip
    dispatcher.idle, dispatcher._token_bound = False, True  # the bucket ended the last claim
    held = dispatcher.permits.try_acquire(1)  # and its one permit is out
    assert held.total == 1 and dispatcher._reserve() is None
    assert dispatcher._sleep_seconds() == control.poll_sleep_s  # a permit's return wakes it


def test_a_handed_over_job_counts_as_claimed_at_its_commit_not_at_its_notice() -> None:
    """A notice read long after its commit (the process was frozen meanwhile) launches a
    job whose claim is that old: the executor re-checks such a claim before its handler
    starts, as it does for any claim older than half the staleness limit."""
    claims: list[float] = []

    class _Recorder(_Launcher):
        def launch(self, job: Job[Any], permit: Any, deadline_ms: int, claimed_at: float) -> None:
            super().launch(job, permit)
            claims.append(claimed_at)

    dispatcher = Dispatcher(
        "a", None, QueuePermits("a", 8), QueueControl(QueueConfig("a")), _Recorder(),  # type: ignore[arg-type]
        claim_lane=ConnectionLane(),
    )  # fmt: skip
    old = _claimed(7)
    old.attempted_at = datetime.now(UTC) - timedelta(seconds=60)
    grant = dispatcher.permits.try_acquire(1)
    dispatcher.take_handoff(old, grant, 0, 16, 0.0)
    assert time.monotonic() - claims[0] >= 59
    # On a host 90 s behind the database (offset +90 s), a claim stamped 60 s ago by the
    # database's clock is still 60 s old: read with the host's clock alone it was "in the
    # future", counted as claimed now, and its re-check skipped (a review of skewed hosts).
    behind = _claimed(8)
    behind.attempted_at = datetime.now(UTC) + timedelta(seconds=90) - timedelta(seconds=60)
    dispatcher.take_handoff(behind, dispatcher.permits.try_acquire(1), 0, 16, 90.0)
    assert 59 <= time.monotonic() - claims[1] < 75
