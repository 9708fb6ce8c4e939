"""I/O-free parts of the job features: configuration, DLQ filters, hook events, progress
snapshots, missed-fire policies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import awa
from awa.client.dlq import filters
from awa.config import build_worker_config
from awa.cronexpr import CronExpression
from awa.hooks import Hooks, event_type
from awa.maintenance.cron import CATCH_UP_BATCH, due_fires
from awa.types import KEEP_CHECKPOINT, Job, JobState
from awa.worker.attempt import Attempt
from awa.worker.permits import QueuePermits
from awa.worker.results import from_return


def _job(**changes: Any) -> Job[Any]:
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "id": 1, "kind": "k", "queue": "q", "args": {}, "state": JobState.RUNNING,
        "priority": 2, "attempt": 1, "max_attempts": 3, "run_lease": 1, "tags": [],
        "metadata": {"a": 1}, "progress": None, "errors": [], "created_at": now,
        "run_at": now, "attempted_at": now, "deadline_at": None, "finalized_at": None,
    }  # fmt: skip
    values.update(changes)
    return Job(**values)


def test_dlq_flag_and_feature_settings_are_validated() -> None:
    config = build_worker_config(
        [awa.QueueConfig("q", dlq=True), {"name": "r", "dlq": False}, ("s", 1)]
    )
    assert [q.dlq for q in config.queues] == [True, False, None]
    assert config.cron_interval_ms == 1_000 and config.dlq_retention_ms == 30 * 86_400_000
    with pytest.raises(awa.InvalidSetting, match="dlq"):
        build_worker_config([awa.QueueConfig("q", dlq="yes")])  # type: ignore[arg-type]
    for name in ("cron_interval_ms", "callback_rescue_interval_ms", "dlq_retention_ms"):
        with pytest.raises(awa.InvalidSetting, match=name):
            build_worker_config(["q"], **{name: 0})


def test_dlq_filters_refuse_an_empty_bulk_action() -> None:
    with pytest.raises(awa.ValidationError) as info:
        filters(None, None, None, None, allow_all=False)
    assert info.value.field == "filter"
    assert filters(None, None, None, None, allow_all=True)["ids"] is None
    params = filters([3, 4], "k", None, timedelta(minutes=2), allow_all=False)
    assert params == {"ids": [3, 4], "kind": "k", "queue": None, "older_than_ms": 120_000}
    assert filters(None, None, None, 1.5, allow_all=False)["older_than_ms"] == 1_500
    with pytest.raises(awa.ValidationError):
        filters([0], None, None, None, allow_all=False)
    with pytest.raises(awa.ValidationError):
        filters(None, None, None, timedelta(seconds=-1), allow_all=False)


@pytest.mark.parametrize(
    ("ids", "older_than", "field"),
    [
        (0, None, "ids[]"),  # one id (as 42 is taken), but none has id 0
        (True, None, "ids"),  # a bool is no id
        ("42", None, "ids"),
        ([2**70], None, "ids[]"),  # past PostgreSQL's bigint
        (None, 10**400, "older_than"),  # past any float
    ],
)
def test_dlq_filters_refuse_what_the_database_could_not_take(
    ids: Any, older_than: Any, field: str
) -> None:
    with pytest.raises(awa.ValidationError) as info:
        filters(ids, None, None, older_than, allow_all=False)
    assert info.value.field == field


def test_dlq_filters_take_one_id_or_a_list() -> None:
    assert filters(42, None, None, None, allow_all=False)["ids"] == [42]
    assert filters([42, 43], None, None, None, allow_all=False)["ids"] == [42, 43]


def test_a_dlq_cursor_past_bigint_is_refused_as_the_cursor() -> None:
    from awa.client.dlq import parse_cursor

    with pytest.raises(awa.ValidationError, match="before"):
        parse_cursor("2026-01-01T00:00:00+00:00|99999999999999999999999")


def test_event_names_and_types() -> None:
    assert event_type("completed") is awa.JobCompleted
    assert event_type(awa.JobRetried) is awa.JobRetried
    assert event_type("failed") is awa.JobExhausted  # an alias
    assert event_type("*") is awa.JobEvent
    with pytest.raises(awa.ValidationError):
        event_type("done")


def test_hooks_filter_by_job_kind_and_isolate_failures() -> None:
    hooks = Hooks()
    seen: list[tuple[str, str]] = []
    hooks.subscribe("started", lambda e: seen.append((e.name, e.job.kind)), job_kind="k")
    hooks.subscribe("*", lambda e: 1 / 0)  # raises: logged, the next hook still runs
    hooks.subscribe("*", lambda e: seen.append(("any", e.job.kind)))
    hooks.job_started(_job(), 0.0)
    hooks.job_started(_job(kind="other"), 0.0)
    outcome = from_return(_job(), None)
    hooks.outcomes_durable([outcome])
    assert seen == [("started", "k"), ("any", "k"), ("any", "other"), ("any", "k")]


def _attempt(job: Job[Any]) -> Attempt:
    permits = QueuePermits(job.queue, 1)
    (permit,) = permits.split(permits.try_acquire(1), 1)
    return Attempt(job, permit, 0, None)


def test_progress_snapshot_is_the_whole_state_of_the_attempt() -> None:
    job = _job()
    attempt = _attempt(job)
    record = attempt.returned(None).record()
    assert "progress" not in record and "metadata" not in record  # nothing set: nothing sent
    job.set_progress(10, "start", checkpoint={"row": 1})
    job.update_metadata({"b": 2})
    attempt.set_progress(20, None, KEEP_CHECKPOINT)  # keep the checkpoint
    job.update_metadata({"c": 3})
    record = attempt.returned(None).record()
    assert record["progress"] == {"percent": 20.0, "checkpoint": {"row": 1}}
    assert record["metadata"] == {"b": 2, "c": 3}  # cumulative: a replay is harmless
    assert job.metadata == {"a": 1, "b": 2, "c": 3} and job.checkpoint == {"row": 1}
    assert attempt.updates.dirty


def test_job_methods_outside_a_worker_raise_an_awa_error() -> None:
    job = _job()
    assert not job.is_cancelled()
    with pytest.raises(awa.WorkerNotRunning, match="not running in a worker"):
        job.set_progress(10)
    attempt = _attempt(job)
    with pytest.raises(awa.WorkerNotRunning):
        job.flush_progress_sync()  # launched without a worker's services
    attempt.request_cancel("deadline")
    assert job.is_cancelled()


def test_missed_fire_policies() -> None:
    expr = CronExpression.parse("* * * * *")
    base = datetime(2024, 1, 1, tzinfo=UTC)
    now = base + timedelta(hours=5, seconds=30)
    assert due_fires(expr, base, now, "coalesce") == [base + timedelta(hours=5)]
    catch_up = due_fires(expr, base, now, "catch_up")
    assert len(catch_up) == CATCH_UP_BATCH and catch_up[0] == base + timedelta(minutes=1)
    assert due_fires(expr, now, now, "coalesce") == []


def test_coalesce_folds_only_fires_the_leader_never_saw_due() -> None:
    """Ticks are a second or more apart: one tick often finds two fires of a per-second
    schedule due, and coalescing them dropped one of every few dozen with nothing down."""
    every_second = CronExpression.parse("* * * * * *")
    base = datetime(2024, 1, 1, 12, tzinfo=UTC)  # the last fire
    now = base + timedelta(seconds=2, milliseconds=50)
    second = timedelta(seconds=1)
    looked = base + timedelta(milliseconds=900)  # the previous tick
    assert due_fires(every_second, base, now, "coalesce", looked) == [
        base + second,
        base + 2 * second,
    ]
    # A new leader never looked: what came due before it is missed, folded into the latest.
    assert due_fires(every_second, base, now, "coalesce") == [base + 2 * second]
    # Downtime of this leader's fleet before its previous tick: those fires stay folded.
    long_ago = base - timedelta(minutes=5)
    assert due_fires(every_second, long_ago, now, "coalesce", looked) == [
        base + second,
        base + 2 * second,
    ]
    # Nothing new since the previous tick, but a fire it saw was not made: the latest.
    assert due_fires(every_second, long_ago, looked, "coalesce", looked) == [base]
