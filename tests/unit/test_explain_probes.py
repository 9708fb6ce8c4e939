"""The reason probes as pure functions: facts in, reasons out, no database."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awa.explain import PROBES, explain
from awa.explain.facts import (
    AHEAD_CAP,
    RATE_SAMPLE,
    Facts,
    FleetFacts,
    QueueFacts,
    overflow_holders,
    permits_for,
)
from awa.explain.wording import duration
from awa.types import (
    HardReserved,
    Job,
    JobState,
    QueueRuntime,
    ReasonCode,
    RuntimeInstance,
    RuntimeSnapshot,
    Weighted,
)

NOW = datetime(2025, 1, 31, 12, 0, 0, tzinfo=UTC)


def job(state: JobState = JobState.AVAILABLE, **changes: Any) -> Job[Any]:
    base: Job[Any] = Job(
        7, "send_email", "email", {}, state, 2, 0, 25, 0, [], {}, None, [],
        NOW - timedelta(minutes=5), NOW - timedelta(minutes=5), None, None, None,
    )  # fmt: skip
    return replace(base, **changes)


def queue(**changes: Any) -> QueueFacts:
    return replace(QueueFacts("email", False, None, None, 0, 0, 0, None), **changes)


def runtime(
    capacity: HardReserved | Weighted,
    in_flight: int,
    rate: float | None = None,
    deadline_ms: int = 300_000,
) -> Any:
    effective = {"poll_interval_ms": 200, "rate_limit": rate, "deadline_ms": deadline_ms}
    return QueueRuntime({}, {}, effective, {}, capacity, in_flight, False)


def instance(pid: int, queues: dict[str, QueueRuntime], global_max: int | None = None) -> Any:
    mode = "weighted" if global_max else "hard_reserved"
    snap = RuntimeSnapshot(f"id-{pid}", "host", pid, NOW, False, mode, global_max, queues)
    return RuntimeInstance(f"id-{pid}", "host", pid, NOW, NOW - timedelta(seconds=2), False, snap)


def facts(j: Job[Any] | None = None, q: QueueFacts | None = None, live: Any = ()) -> Facts:
    return Facts(j or job(), NOW, None, None, None, q or queue(), tuple(live))


def codes(f: Facts) -> list[str]:
    return [r.code for r in explain(f).reasons]


def test_every_state_has_probes_and_every_code_a_probe() -> None:
    assert set(PROBES) == set(JobState)
    produced = {p.__name__.removeprefix("fleet_") for probes in PROBES.values() for p in probes}
    assert {c.value for c in ReasonCode} <= produced


def test_weighted_permits_count_the_unheld_overflow() -> None:
    # global 10, minimums 2 + 3 → overflow 5; 'email' holds 1 of it, 'reports' 3: 1 unheld.
    inst = instance(
        1,
        {"email": runtime(Weighted(2, 1, 1), 3), "reports": runtime(Weighted(3, 1, 3), 6)},
        global_max=10,
    )
    assert permits_for(inst, "email") == (3, 2 + 1 + 1)


def test_the_database_count_wins_over_an_old_snapshot() -> None:
    # The snapshot (2 s old) says 0 of 2 held; the database counts 2 running jobs.
    live = [instance(1, {"email": runtime(HardReserved(2), 0)})]
    assert codes(facts(q=queue(running=2), live=live)) == [ReasonCode.WORKERS_BUSY]
    assert codes(facts(q=queue(running=1), live=live)) == [ReasonCode.QUEUED_BEHIND]
    # ... and says why its "holds 0 of 2" disagrees ("counts 2 running"), a review.
    (busy,) = explain(facts(q=queue(running=2), live=live)).reasons
    assert "holds 0 of 2 (reported 2.0 s ago) (reports older than the latest claims)" in (
        busy.message
    )


def test_a_process_without_a_limiter_and_a_free_permit_is_not_rate_limited() -> None:
    limited = instance(1, {"email": runtime(HardReserved(2), 0, rate=1.0)})
    free = instance(2, {"email": runtime(HardReserved(2), 0)})
    assert codes(facts(live=[limited]))[0] == ReasonCode.RATE_LIMITED
    assert codes(facts(live=[limited, free])) == [ReasonCode.QUEUED_BEHIND]


def test_a_full_process_with_a_limiter_does_not_hide_a_free_limited_one() -> None:
    full = instance(1, {"email": runtime(HardReserved(1), 1, rate=2.0)})
    free = instance(2, {"email": runtime(HardReserved(1), 0, rate=3.0)})
    found = explain(facts(q=queue(running=1, ahead=4), live=[full, free])).reasons
    assert [r.code for r in found] == [ReasonCode.RATE_LIMITED, ReasonCode.QUEUED_BEHIND]
    assert "2/s and 3/s per process, 5/s across the 2 live processes" in found[0].message
    assert found[0].details["turn_in_s"] == pytest.approx(1.0)  # (4 + 1) / 5


def test_ahead_is_capped_and_said_so() -> None:
    live = [instance(1, {"email": runtime(HardReserved(1), 1)})]
    found = explain(facts(q=queue(running=1, ahead=AHEAD_CAP), live=live)).reasons[1]
    assert found.message.startswith("At least 10 000 jobs of queue 'email' are ahead")
    assert found.details["ahead_capped"] is True


def test_completion_rate_is_taken_over_the_time_its_completions_took() -> None:
    whole_window = queue(completed_recently=31, completed_since=NOW - timedelta(seconds=300))
    assert whole_window.completion_rate(NOW) == pytest.approx(0.1)
    # A queue that started ten seconds ago: its rate, not a fifth of it over five minutes.
    young = queue(completed_recently=246, completed_since=NOW - timedelta(seconds=10))
    assert young.completion_rate(NOW) == pytest.approx(24.5)
    full = queue(completed_recently=RATE_SAMPLE, completed_since=NOW - timedelta(seconds=10))
    assert full.completion_rate(NOW) == pytest.approx(99.9)
    # A slow queue: one job every 4 minutes, two in the window, not 2 per 61 s.
    slow = queue(completed_recently=2, completed_since=NOW - timedelta(seconds=250))
    assert slow.completion_rate(NOW) == pytest.approx(1 / 250)
    # One completion gives no rate: over the whole window it read "1 job in 5 minutes"
    # for a queue that had just started (a review: "about 5 min" under a 10 s turn).
    assert queue(completed_recently=1, completed_since=NOW).completion_rate(NOW) is None
    assert queue().completion_rate(NOW) is None


def test_a_partitions_rate_is_its_share_of_the_queues_completions() -> None:
    """Its line moves at the partition's share: the queue's whole rate made a partition at
    its cap look many times faster (a review: 90 ms estimated, 1.9 s taken)."""
    q = queue(completed_recently=11, completed_since=NOW - timedelta(seconds=1),
              completed_in_partition=2)  # fmt: skip
    assert q.completion_rate(NOW) == pytest.approx(10 * 2 / 11)
    none_of_its_own = queue(completed_recently=11, completed_since=NOW - timedelta(seconds=1),
                            completed_in_partition=0)  # fmt: skip
    assert none_of_its_own.completion_rate(NOW) is None


def test_due_scheduled_job_waits_for_promotion_and_says_nobody_promotes() -> None:
    due = job(JobState.SCHEDULED, run_at=NOW - timedelta(seconds=3))
    found = explain(facts(due))
    assert [r.code for r in found.reasons] == [ReasonCode.SCHEDULED, ReasonCode.NO_LIVE_WORKER]
    assert "Due since 3.0 s ago" in found.reasons[0].message
    assert "no worker process is live to run that pass" in found.reasons[0].message


def test_running_job_found_in_a_snapshot_names_that_process() -> None:
    running = job(JobState.RUNNING, attempt=1, attempted_at=NOW - timedelta(seconds=90))
    other = instance(1, {"email": runtime(HardReserved(2), 1)})
    mine = instance(2, {"email": runtime(HardReserved(2), 1)})
    mine = replace(mine, snapshot=replace(mine.snapshot, running_job_ids=(7,)))
    reason = explain(facts(running, live=[other, mine])).reasons[0]
    assert "attempt 1 of 25, on host pid 2." in reason.message
    assert reason.details["pid"] == 2


def test_running_job_nobody_lists_names_the_candidates_or_the_rescuer() -> None:
    running = job(JobState.RUNNING, attempt=1, attempted_at=NOW)
    two = [instance(1, {"email": runtime(HardReserved(2), 1)}),
           instance(2, {"email": runtime(HardReserved(2), 1)})]  # fmt: skip
    assert "on one of the 2 live processes serving queue 'email' (host pid 1 and host pid 2)" in (
        explain(facts(running, live=two)).reasons[0].message
    )
    assert "rescuer returns the job" in explain(facts(running)).reasons[0].message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.05, "50 ms"), (2.44, "2.4 s"), (42, "42 s"), (250, "4 min 10 s"), (3600, "1 h"),
     (7500, "2 h 5 min"), (90000, "1 d 1 h")],
)  # fmt: skip
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_failed_says_whether_attempts_ran_out() -> None:
    errors = [{"error": "relay down.", "attempt": 3, "type": "ConnectionError"}]
    spent = job(JobState.FAILED, attempt=3, max_attempts=3, errors=errors, finalized_at=NOW)
    message = explain(facts(spent)).reasons[0].message
    assert " after all 3 attempts: ConnectionError: relay down. awa job retry 7 " in message


def test_a_job_handed_back_for_an_unknown_kind_says_so() -> None:
    """ADR 0027: a process without a handler reschedules the job, attempt refunded."""
    record = {"count": 3, "backoff_s": 20.0, "host": "web-2", "pid": 41}
    handed = job(
        JobState.SCHEDULED,
        run_at=NOW + timedelta(seconds=20),
        attempted_at=NOW - timedelta(seconds=1),
        metadata={"unknown_kind": record},
    )
    found = explain(facts(handed))
    reason = found.reasons[0]
    assert reason.code == ReasonCode.SCHEDULED
    assert "It was handed back 3 times, without spending an attempt: the last process to " in (
        reason.message
    )
    assert "(web-2 pid 41) has no handler for kind 'send_email'" in reason.message
    assert "snoozed" not in reason.message
    assert found.summary == (
        "Job 7 (send_email) was handed back 3 times (no handler for kind 'send_email' in "
        "web-2 pid 41); it is tried again in 20 s."
    )
    assert reason.details["handed_back"] == record


def fleet_facts(q: QueueFacts | None = None, **fleet: Any) -> Facts:
    live = [instance(1, {"email": runtime(HardReserved(8), 0)})]
    return replace(facts(q=q, live=live), fleet=FleetFacts(**fleet))


def test_a_partition_out_of_tokens_is_a_partition_limit_not_the_queue_rate() -> None:
    found = explain(
        fleet_facts(
            queue(ahead=1), rate_limit=2.0, partition_by="customer", partition="acme",
            tokens=0.5,
        )
    )  # fmt: skip
    assert [r.code for r in found.reasons] == [ReasonCode.PARTITION_LIMIT, ReasonCode.QUEUED_BEHIND]
    message = found.reasons[0].message
    assert "Partition customer='acme' of queue 'email' is at its fleet limit: the bucket " in (
        message
    )
    assert "(2/s, burst 2) holds 0.50 tokens, the next is due in 250 ms" in message
    assert found.reasons[0].details["turn_in_s"] == pytest.approx(0.75)  # (1 + 1 - 0.5) / 2


def test_jobs_without_the_partition_key_share_one_partition() -> None:
    found = explain(
        fleet_facts(concurrency=1, partition_by="customer", partition="", partition_running=1)
    )
    assert found.reasons[0].message.startswith("Partition jobs without customer of queue")


def test_fleet_limits_with_room_say_nothing() -> None:
    roomy = fleet_facts(
        queue(running=1), concurrency=2, rate_limit=5.0, tokens=3.0, pool_total=10,
        pool_room=1,
    )  # fmt: skip
    assert codes(roomy) == [ReasonCode.QUEUED_BEHIND]  # next up
    # A partitioned queue's concurrency is per partition: the queue's total does not count.
    partitioned = fleet_facts(
        queue(running=5), concurrency=2, partition_by="customer", partition="acme",
        partition_running=1,
    )  # fmt: skip
    assert codes(partitioned) == [ReasonCode.QUEUED_BEHIND]


def test_a_running_job_parked_in_wait_for_callback_says_so() -> None:
    """A handler waiting in wait_for_callback looked like any busy handler (a review)."""
    running = job(JobState.RUNNING, attempt=1, attempted_at=NOW - timedelta(seconds=2))
    live = [instance(1, {"email": runtime(HardReserved(2), 1)})]
    parked = replace(facts(running, live=live), callback_id="3cc6258d",
                     callback_timeout_at=NOW + timedelta(minutes=10))  # fmt: skip
    reason = explain(parked).reasons[0]
    assert "Its handler waits in wait_for_callback for callback 3cc6258d" in reason.message
    assert "deadline paused meanwhile; the callback times out at" in reason.message
    assert "(in 10 min), raising awa.CallbackTimeout" in reason.message
    assert reason.details["callback_id"] == "3cc6258d"
    assert "waiting for callback 3cc6258d" in explain(parked).summary
    assert "callback" not in explain(facts(running)).reasons[0].message
    # Registered, not waited for yet: the deadline (set to NULL by the wait) still runs.
    working = replace(parked, job=replace(running, deadline_at=NOW + timedelta(seconds=59)))
    message = explain(working).reasons[0].message
    assert "Its handler registered callback 3cc6258d, which times out at" in message
    assert "is still working" in message and "paused" not in message
    # A queue without a deadline (deadline_ms=0) has no pause to tell a wait by.
    no_deadline = [instance(1, {"email": runtime(HardReserved(2), 1, deadline_ms=0)})]
    unknown = explain(replace(parked, live=tuple(no_deadline))).reasons[0].message
    assert "waits for it in wait_for_callback or still works" in unknown


def test_a_job_handed_to_an_external_system_names_its_callback() -> None:
    waiting = job(JobState.WAITING_EXTERNAL, attempt=1, attempted_at=NOW - timedelta(seconds=2))
    message = explain(replace(facts(waiting), callback_id="3cc6258d")).reasons[0].message
    assert "(attempt 1 of 25, started 2.0 s ago) handed it" in message  # no stray comma
    assert "resume_external with callback id 3cc6258d." in message
    # Answered before its handler returned: nothing to answer; the leader releases it.
    answered = explain(facts(waiting)).reasons[0].message
    assert "whose answer came before the handler returned" in answered
    assert "no worker process is live to run that pass" in answered


def test_a_partitions_backlog_is_said_to_be_its_partitions() -> None:
    live = [instance(1, {"email": runtime(HardReserved(1), 1)})]
    q = queue(running=1, ahead=3, completed_recently=11,
              completed_since=NOW - timedelta(seconds=1), completed_in_partition=2)  # fmt: skip
    partitioned = replace(facts(q=q, live=live), fleet=FleetFacts(partition_by="cust",
                                                                 partition="A"))  # fmt: skip
    found = explain(partitioned).reasons[1]
    assert found.message.startswith(
        "3 jobs of partition cust='A' of queue 'email' are ahead of it in claim order"
    )
    assert "its partition's share (2 of the queue's last 11 completions)" in found.message
    none = replace(partitioned, queue=replace(q, completed_in_partition=0))
    assert "none of the queue's last 11 completions was of its partition" in (
        explain(none).reasons[1].message
    )


def test_one_completion_is_too_few_for_an_estimate() -> None:
    live = [instance(1, {"email": runtime(HardReserved(1), 1)})]
    q = queue(running=1, ahead=2, completed_recently=1, completed_since=NOW)
    found = explain(facts(q=q, live=live)).reasons[1]
    assert "only one job of the queue completed in the last 5 min" in found.message
    assert found.details["estimated_wait_s"] is None


def test_one_permit_is_not_all_1_permits() -> None:
    live = [instance(1, {"email": runtime(HardReserved(1), 1)})]
    assert (
        "its one permit for queue 'email' is in use"
        in explain(facts(q=queue(running=1), live=live)).summary
    )


def test_a_retry_the_handler_asked_for_is_not_called_a_failure() -> None:
    errors = [{"error": "retry requested after 60s", "attempt": 1, "type": "RetryAfter"}]
    retrying = job(JobState.RETRYABLE, attempt=1, errors=errors,
                   run_at=NOW - timedelta(seconds=1))  # fmt: skip
    message = explain(facts(retrying)).reasons[0].message
    assert message.startswith(
        "Attempt 1 of 25 asked to be retried later (retry requested after 60s). "
    )
    assert "no worker process is live to run that pass" in message  # due, and nobody promotes


def test_the_first_in_line_for_a_token_takes_the_next_one() -> None:
    limited = replace(facts(), fleet=FleetFacts(rate_limit=0.2, burst=1, tokens=0.2))
    message = " ".join(r.message for r in explain(limited).reasons)
    assert "and it takes the next one, so its turn comes in about 4.0 s" in message


def test_a_weighted_queue_at_its_minimum_names_who_holds_the_overflow() -> None:
    """'all 0 permits … holds 0 of 0' did not say why (a review): another queue holds the
    process's whole overflow."""
    inst = instance(
        1,
        {"email": runtime(Weighted(0, 1, 0), 0), "reports": runtime(Weighted(0, 1, 2), 2)},
        global_max=2,
    )
    found = explain(facts(q=queue(running=0), live=[inst])).reasons[0]
    assert found.code == ReasonCode.WORKERS_BUSY
    assert "holds 0 of 0 (reported 2.0 s ago), its shared overflow held by 'reports' 2" in (
        found.message
    )
    assert "no permit is free for queue 'email'" in explain(facts(live=[inst])).summary
    assert "gets no permit until a minimum is lowered" not in found.message  # it frees up


def test_a_queue_the_minimums_leave_no_permit_says_it_never_gets_one() -> None:
    """min_workers 0 while the other minimums take all of global_max_workers: "every
    permit is in use" read as a wait that ends (a review)."""
    inst = instance(
        1,
        {"email": runtime(Weighted(0, 1, 0), 0), "reports": runtime(Weighted(2, 1, 0), 0)},
        global_max=2,
    )
    found = explain(facts(q=queue(running=0), live=[inst])).reasons[0]
    assert found.code == ReasonCode.WORKERS_BUSY
    assert "Its min_workers is 0 and the other queues' minimums take the whole" in found.message
    assert "(awa queue overrides show email)" in found.message


@pytest.mark.parametrize(("fleet_rate", "first"), [(2.0, "per process"), (0.2, "across the fleet")])
def test_of_two_rate_limits_the_tighter_decides(fleet_rate: float, first: str) -> None:
    """A fleet bucket and each process's own limiter (2 × 0.5/s = 1/s): the summary named
    the fleet's 2/s, first in the probe order, though the jobs started at 1/s (a review)."""
    live = [instance(p, {"email": runtime(HardReserved(2), 0, rate=0.5)}) for p in (1, 2)]
    both = replace(facts(q=queue(ahead=9), live=live),
                   fleet=FleetFacts(rate_limit=fleet_rate, burst=1, tokens=0.0))  # fmt: skip
    reasons = explain(both).reasons
    assert [r.code for r in reasons][:2] == [ReasonCode.RATE_LIMITED] * 2
    assert first in reasons[0].message
    assert reasons[0].details["turn_in_s"] >= reasons[1].details["turn_in_s"]


def test_a_paused_queue_names_a_command_a_shell_takes_as_one_argument() -> None:
    """A queue name with a space or a '!' printed bare split (or history-expanded) when
    pasted into a shell."""
    f = facts(job(queue="we!rd q/é"), queue(name="we!rd q/é", paused=True))
    message = explain(f).reasons[0].message
    assert "(awa queue resume 'we!rd q/é')" in message
    plain = explain(facts(q=queue(paused=True))).reasons[0].message
    assert "(awa queue resume email)" in plain


def test_a_cap_held_by_jobs_no_live_process_runs_says_the_rescuer_frees_it() -> None:
    """Jobs of a killed process held the fleet cap until the rescuer returned them, and
    explain said the waiting job "starts when one of them ends" (a review)."""
    base = instance(1, {"email": runtime(HardReserved(8), 1)})
    live = replace(
        base,
        started_at=NOW - timedelta(hours=1),
        snapshot=replace(base.snapshot, running_job_ids=(31,)),
    )
    running = (
        (31, NOW - timedelta(minutes=10), None),  # listed: runs there
        (32, NOW - timedelta(minutes=10), None),  # claimed before the snapshot, not in it
        (33, NOW - timedelta(seconds=1.5), None),  # claimed after it: may run there
    )
    held = replace(
        facts(q=queue(running=3, running_jobs=running), live=[live]),
        fleet=FleetFacts(concurrency=3),
    )
    reason = explain(held).reasons[0]
    assert reason.code == ReasonCode.CONCURRENCY_LIMIT
    assert reason.details["unattended"] == 1
    assert "3 are running, 1 of it in no live process" not in reason.message
    assert ", 1 of them in no live process" in reason.message
    assert "it starts when one of them ends or is rescued" in reason.message
    # The same jobs, each in a live snapshot: nothing is said of a rescue.
    listed = replace(live, snapshot=replace(base.snapshot, running_job_ids=(31, 32, 33)))
    reason = explain(replace(held, live=(listed,))).reasons[0]
    assert reason.details["unattended"] == 0 and "rescue" not in reason.message


def test_behind_a_fleet_rate_limit_the_wait_is_the_buckets_not_a_past_rate() -> None:
    """The completion rate, taken over idle time too, gave a wait longer or shorter than
    the bucket's turn in one explanation (a review): the longer of the two is given."""
    # 29 completions over 63 s: 3 ahead take ~6.5 s; the bucket's turn: 3.8 / 0.2 = 19 s.
    lately = queue(ahead=3, completed_recently=30, completed_since=NOW - timedelta(seconds=63))
    found = explain(fleet_facts(lately, rate_limit=0.2, tokens=0.2))
    assert [r.code for r in found.reasons] == [ReasonCode.RATE_LIMITED, ReasonCode.QUEUED_BEHIND]
    behind = found.reasons[1]
    assert "the fleet rate limit paces them" in behind.message
    assert behind.details["estimated_wait_s"] is None
    # A bucket faster than the completions (a cap holds the queue too): theirs is said.
    capped = explain(fleet_facts(lately, rate_limit=2.0, tokens=0.2)).reasons[1]
    assert capped.details["estimated_wait_s"] == pytest.approx(3 / (29 / 63), rel=1e-3)
    # Without the limit, the completion rate gives the estimate as before.
    free = explain(fleet_facts(lately)).reasons[0]
    assert free.details["estimated_wait_s"] is not None


def test_past_the_running_jobs_looked_at_the_unattended_count_says_at_least() -> None:
    """Past the first 10 000 running jobs the count was silently short (a review)."""
    base = instance(1, {"email": runtime(HardReserved(8), 1)})
    live = replace(base, started_at=NOW - timedelta(hours=1))
    running = ((32, NOW - timedelta(minutes=10), None),)
    held = replace(
        facts(q=queue(running=AHEAD_CAP + 2, running_jobs=running), live=[live]),
        fleet=FleetFacts(concurrency=3),
    )
    reason = explain(held).reasons[0]
    assert reason.details["unattended_capped"] is True
    assert ", at least 1 of them (of the 10000 heard from least lately) in no live process" in (
        reason.message
    )


def test_a_minimum_lowered_under_what_a_queue_runs_leaves_no_overflow_free() -> None:
    """'wa' runs 2 at a minimum just lowered to 1 (its snapshot: overflow_held 0): the
    pool of 2 has no free permit, though explain said the next poll claims the job."""
    inst = instance(
        1,
        {"wa": runtime(Weighted(1, 1, 0), 2), "wb": runtime(Weighted(0, 1, 0), 0)},
        global_max=2,
    )
    assert permits_for(inst, "wb") == (0, 0)


def test_a_minimum_raised_above_what_the_others_leave_promises_no_free_permit() -> None:
    """'a' at a minimum raised from 1 to 3 while it runs 4 of global 4: explain said a
    free permit waited for the next poll (a review)."""
    inst = instance(
        1,
        {"a": runtime(Weighted(3, 1, 3), 4), "b": runtime(Weighted(0, 1, 0), 0)},
        global_max=4,
    )
    assert permits_for(inst, "a") == (4, 4)
    found = explain(facts(job(queue="a"), queue(name="a", running=4), live=[inst]))
    assert found.reasons[0].code == ReasonCode.WORKERS_BUSY


def test_the_overflow_a_lowered_minimum_leaves_running_is_named_as_held() -> None:
    inst = instance(
        1,
        {"a": runtime(Weighted(1, 1, 0), 4), "b": runtime(Weighted(0, 1, 0), 0)},
        global_max=4,
    )
    assert overflow_holders(inst, "b") == {"a": 3}


def test_a_partitions_own_bucket_gives_its_wait_not_its_share_of_past_completions() -> None:
    """A key just come had 1 of the queue's 19 completions: at that share of the queue's
    rate its 2 jobs ahead took 9.0 s, beside its bucket's turn of 1.2 s in the same
    explanation, and it started 1.2 s later (a review)."""
    q = queue(ahead=2, completed_recently=20, completed_since=NOW - timedelta(seconds=4.3),
              completed_in_partition=1)  # fmt: skip
    keyed = {"rate_limit": 2.0, "partition_by": "customer", "partition": "c", "tokens": 0.6}
    found = explain(fleet_facts(q, **keyed))
    assert [r.code for r in found.reasons] == [ReasonCode.PARTITION_LIMIT, ReasonCode.QUEUED_BEHIND]
    behind = found.reasons[1]
    assert "the fleet rate limit paces them" in behind.message
    assert behind.details["estimated_wait_s"] is None
    # A fleet cap beside it: the completions may be the slower, and are said.
    capped = explain(fleet_facts(q, concurrency=1, **keyed)).reasons
    assert capped[-1].details["estimated_wait_s"] is not None


def test_no_room_in_the_pool_says_what_keeps_the_slots_nobody_runs() -> None:
    """The words "no room … it runs 3, and the members run 3 of 4" read as a bug without what
    kept the fourth slot: another member's unused minimum (a review)."""
    pooled = {"pool_total": 4, "pool_room": 0, "pool_min_workers": 1, "pool_weight": 1}
    reason = explain(fleet_facts(queue(ahead=0, running=3), pool_running=3, **pooled)).reasons[0]
    assert reason.code is ReasonCode.POOL_LIMIT
    assert "the members run 3 of 4; the other 1 slot is kept for other members: their " in (
        reason.message
    )
    full = explain(fleet_facts(queue(ahead=0, running=4), pool_running=4, **pooled)).reasons[0]
    assert "run 4 of 4 (awa pool show)" in full.message
