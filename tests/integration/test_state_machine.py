"""A stateful property test of the job state machine against the real SQL statements.

Hypothesis drives random sequences of inserts (through the client), claims, outcomes,
heartbeats and shutdown fences — under the attempt's own ``(run_lease, attempted_at)``
or under a stale one (an older lease, or the current lease with another
``attempted_at``: a claim lost in a crash, ADR 0006) —, cancels, retries, pauses,
rescues and promotions, straight through the statements of :mod:`awa.db.sql`. Jobs go
stale by moving ``heartbeat_at`` (or ``deadline_at``, or ``run_at``) back with a direct
UPDATE. After every step:

- every row agrees with an in-memory model (state, attempt, lease, fencing key, error
  count, attempt budget, finalized and heartbeat columns);
- every state change is an edge of docs/job-states.md, between CONTRACT §2's states
  (a trigger logs each change);
- a write under a stale key returned nothing and left its row byte for byte unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import awa
from awa.db import sql
from tests.chaos.support import ALLOWED, install_audit
from tests.helpers import lead_maintenance

QUEUES = ("a", "b")
FINAL = {"completed", "failed", "cancelled"}
HOUR_MS = 3_600_000
Key = tuple[int, datetime]  # (run_lease, attempted_at)


@dataclass
class JobModel:
    """What the row of one job must look like."""

    id: int
    queue: str
    priority: int
    max_attempts: int
    state: str
    attempt: int = 0
    run_lease: int = 0
    attempted_at: datetime | None = None
    errors: int = 0
    due: bool = True  # run_at has passed (matters for scheduled and retryable)
    stale: bool = False  # heartbeat older than the rescuer's staleness (running)
    has_deadline: bool = False
    overdue: bool = False  # deadline passed, grace included (running)
    keys: list[Key] = field(default_factory=list)  # every attempt's fencing key

    @property
    def current_key(self) -> Key | None:
        return None if self.attempted_at is None else (self.run_lease, self.attempted_at)

    def holds(self, key: Key) -> bool:
        """True when a write under ``key`` must take effect."""
        return self.state == "running" and key == self.current_key

    def back_to_waiting(self, *, count_error: bool = True) -> None:
        """A rescue or a shutdown fence: retryable (failed on the last attempt)."""
        self.state = "failed" if self.attempt >= self.max_attempts else "retryable"
        self.run_lease += 1
        self.errors += count_error
        self.due = True
        self.stale = self.overdue = self.has_deadline = False


class JobStateMachine(RuleBasedStateMachine):
    """One example: a fresh set of tables and a model that starts empty."""

    conn: psycopg.Connection[Any]
    client: awa.Client

    def __init__(self) -> None:
        super().__init__()
        self.conn.execute(
            "TRUNCATE awa.jobs, awa.queue_meta, public.chaos_transitions RESTART IDENTITY"
        )
        self.epoch = lead_maintenance(self.conn)  # a new epoch per example
        self.jobs: dict[int, JobModel] = {}
        self.paused: set[str] = set()
        self.seen_transitions = 0
        self.inserted = 0

    # -- helpers ---------------------------------------------------------------------

    def run(self, query: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self.conn.execute(query, params).fetchall()

    def rows(self, ids: list[int]) -> dict[int, str]:
        """Each row as JSON text, to prove a stale write left it untouched."""
        found = self.conn.execute(
            "SELECT id, row_to_json(j)::text FROM awa.jobs AS j WHERE id = ANY(%s)", (ids,)
        ).fetchall()
        return dict(found)

    def pick_keys(self, data: st.DataObject, *, max_size: int) -> list[tuple[JobModel, Key]]:
        """Some (job, key) pairs: current keys, older ones, and forged ones that reuse the
        current lease with another attempted_at (a claim lost in a crash, re-made)."""
        live: list[tuple[int, Key]] = []  # half the picks: keys that hold a running job
        other: list[tuple[int, Key]] = []
        for job in self.jobs.values():
            for key in job.keys:
                (live if job.holds(key) else other).append((job.id, key))
            if job.current_key is not None:
                lease, at = job.current_key
                other.append((job.id, (lease, at - timedelta(microseconds=1))))
        pools = [st.sampled_from(sorted(c)) for c in (live, other) if c]
        picked = data.draw(st.lists(st.one_of(pools), min_size=1, max_size=max_size, unique=True))
        return [(self.jobs[job_id], key) for job_id, key in picked]

    @staticmethod
    def key_params(pairs: list[tuple[JobModel, Key]]) -> dict[str, Any]:
        return {
            "ids": [job.id for job, _ in pairs],
            "run_leases": [key[0] for _, key in pairs],
            "attempted_ats": [key[1] for _, key in pairs],
        }

    def check_stale_untouched(
        self, pairs: list[tuple[JobModel, Key]], before: dict[int, str], applied: set[int]
    ) -> None:
        after = self.rows([job.id for job, _ in pairs])
        for job, _ in pairs:
            if job.id not in applied:
                assert after[job.id] == before[job.id], f"stale write changed job {job.id}"

    # -- producing -------------------------------------------------------------------

    @initialize(queue=st.sampled_from(QUEUES), count=st.integers(1, 4))
    def some_available_jobs(self, queue: str, count: int) -> None:
        for _ in range(count):
            self.insert(queue, priority=2, max_attempts=2, future=False, many=0)

    @rule(
        queue=st.sampled_from(QUEUES),
        priority=st.integers(1, 4),
        max_attempts=st.integers(1, 3),
        future=st.booleans(),
        many=st.integers(0, 2),
    )
    def insert(self, queue: str, priority: int, max_attempts: int, future: bool, many: int) -> None:
        run_at = datetime.now(UTC) + timedelta(hours=1) if future else None
        options = {"kind": "k", "queue": queue, "priority": priority,
                   "max_attempts": max_attempts, "run_at": run_at}  # fmt: skip
        self.inserted += 1
        if many:  # the COPY path
            jobs = self.client.insert_many([{"n": self.inserted, "i": i} for i in range(many)],
                                           **options)  # fmt: skip
        else:
            jobs = [self.client.insert({"n": self.inserted}, **options)]
        for job in jobs:
            state = "scheduled" if future else "available"
            assert job.state.value == state
            self.jobs[job.id] = JobModel(job.id, queue, priority, max_attempts, state,
                                         due=not future)  # fmt: skip

    # -- the worker's hot path -------------------------------------------------------

    @precondition(lambda self: any(j.state == "available" for j in self.jobs.values()))
    @rule(queue=st.sampled_from(QUEUES), limit=st.integers(1, 3), deadline=st.booleans())
    def claim(self, queue: str, limit: int, deadline: bool) -> None:
        rows = self.run(
            sql.JOB_CLAIM_AVAILABLE,
            {"queue": queue, "limit": limit, "deadline_ms": HOUR_MS if deadline else 0,
             "synchronous_commit": "off", "instance": None, "held": None},
        )  # fmt: skip
        waiting = [j for j in self.jobs.values() if j.queue == queue and j.state == "available"]
        expected = 0 if queue in self.paused else min(limit, len(waiting))
        assert len(rows) == expected
        claimed = {row[0] for row in rows}
        assert claimed <= {j.id for j in waiting}
        if claimed:  # dispatch order: nothing left behind has a higher priority
            worst = max(self.jobs[i].priority for i in claimed)
            assert all(j.priority >= worst for j in waiting if j.id not in claimed)
        for row in rows:
            job = self.jobs[row[0]]
            job.state = "running"
            job.attempt += 1
            job.run_lease += 1
            assert (row[6], row[8]) == (job.attempt, job.run_lease)  # attempt, run_lease
            job.attempted_at = row[15]
            job.keys.append((job.run_lease, row[15]))
            job.stale = job.overdue = False
            job.has_deadline = deadline

    @precondition(lambda self: any(j.keys for j in self.jobs.values()))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["complete", "raise", "terminal", "retry_after", "snooze",
                                 "cancel"]),
        delayed=st.booleans(),
    )  # fmt: skip
    def finalize(self, data: st.DataObject, outcome: str, delayed: bool) -> None:
        pairs = self.pick_keys(data, max_size=3)
        before = self.rows([job.id for job, _ in pairs])
        delay = HOUR_MS if delayed else 0
        records = []
        for job, key in pairs:
            state, delay_ms, refund, error = self.outcome_of(job, outcome, delay)
            records.append({"id": job.id, "run_lease": key[0], "attempted_at": key[1].isoformat(),
                            "state": state, "delay_ms": delay_ms, "refund": refund,
                            "error": error})  # fmt: skip
        rows = self.run(
            sql.JOB_FINALIZE_MANY,
            {"outcomes": json.dumps(records), "synchronous_commit": "off", "claims": None},
        )
        applied = {row[0] for row in rows}
        expected = {job.id for job, key in pairs if job.holds(key)}
        assert applied == expected
        event(f"finalize: {len(applied)} applied, {len(pairs) - len(applied)} stale")
        self.check_stale_untouched(pairs, before, applied)
        for job, key in pairs:
            if job.id in applied and job.holds(key):
                state, delay_ms, refund, error = self.outcome_of(job, outcome, delay)
                job.state = state
                job.attempt -= refund
                job.errors += error is not None
                job.due = not delay_ms
                job.stale = job.overdue = job.has_deadline = False

    @staticmethod
    def outcome_of(job: JobModel, outcome: str, delay: int) -> tuple[str, Any, bool, Any]:
        """(state, delay_ms, refund, error) as awa.worker.results builds them."""
        error = {"error": outcome, "attempt": job.attempt, "type": outcome}
        if outcome == "complete":
            return "completed", None, False, None
        if outcome == "terminal":
            return "failed", None, False, error
        if outcome == "snooze":
            return "scheduled", delay, True, None
        if outcome == "cancel":
            return "cancelled", None, False, error
        if job.attempt >= job.max_attempts:  # raise / retry_after with no attempt left
            return "failed", None, False, error
        return "retryable", delay, False, error

    @precondition(lambda self: any(j.keys for j in self.jobs.values()))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        pairs = self.pick_keys(data, max_size=4)
        before = self.rows([job.id for job, _ in pairs])
        rows = self.run(
            sql.JOB_HEARTBEAT_MANY, {**self.key_params(pairs), "synchronous_commit": "off"}
        )
        alive = {row[0] for row in rows if not row[1]}  # held: none, nothing else locks
        assert alive == {job.id for job, key in pairs if job.holds(key)}
        assert all(not row[1] for row in rows)
        self.check_stale_untouched(pairs, before, alive)
        for job, key in pairs:
            if job.holds(key):
                job.stale = False

    @precondition(lambda self: any(j.keys for j in self.jobs.values()))
    @rule(data=st.data())
    def shutdown_fence(self, data: st.DataObject) -> None:
        pairs = self.pick_keys(data, max_size=3)
        before = self.rows([job.id for job, _ in pairs])
        rows = self.run(sql.JOB_FENCE_ATTEMPTS, {**self.key_params(pairs), "reason": "shutdown"})
        fenced = {row[0] for row in rows}
        assert fenced == {job.id for job, key in pairs if job.holds(key)}
        self.check_stale_untouched(pairs, before, fenced)
        for job, key in pairs:
            if job.holds(key):
                job.back_to_waiting()

    # -- operators and time --------------------------------------------------------

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data(), action=st.sampled_from(["cancel", "retry", "pause", "resume"]))
    def operator(self, data: st.DataObject, action: str) -> None:
        """One of the admin statements (in one rule, so they do not crowd out the rest)."""
        job = self.jobs[data.draw(st.sampled_from(sorted(self.jobs)))]
        if action == "cancel":
            rows = self.run(sql.JOB_CANCEL, {"id": job.id, "reason": "operator"})
            assert len(rows) == (job.state not in FINAL)
            if rows:
                job.state = "cancelled"
                job.errors += 1
                job.stale = job.overdue = job.has_deadline = False
        elif action == "retry":
            rows = self.run(sql.JOB_RETRY, {"id": job.id})
            retriable = {"scheduled", "retryable", "failed", "cancelled", "completed"}
            assert len(rows) == (job.state in retriable)
            if rows:
                job.state = "available"
                job.max_attempts = max(job.max_attempts, min(job.attempt + 1, 1000))
        elif action == "pause":
            self.client.pause_queue(job.queue, paused_by="hypothesis")
            self.paused.add(job.queue)
        else:
            self.client.resume_queue(job.queue)
            self.paused.discard(job.queue)

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data(), what=st.sampled_from(["heartbeat_at", "deadline_at", "run_at"]))
    def time_passes(self, data: st.DataObject, what: str) -> None:
        """A running job's heartbeat goes stale, its deadline passes, or a waiting job's
        run_at arrives — by moving the column back, not by sleeping."""
        eligible = {
            "heartbeat_at": lambda j: j.state == "running",
            "deadline_at": lambda j: j.state == "running" and j.has_deadline,
            "run_at": lambda j: j.state in ("scheduled", "retryable") and not j.due,
        }[what]
        candidates = sorted(i for i, j in self.jobs.items() if eligible(j))
        if not candidates:
            return
        job = self.jobs[data.draw(st.sampled_from(candidates))]
        self.conn.execute(
            f"UPDATE awa.jobs SET {what} = now() - interval '1 hour' WHERE id = %s", (job.id,)
        )
        if what == "heartbeat_at":
            job.stale = True
        elif what == "deadline_at":
            job.overdue = True
        else:
            job.due = True

    # -- maintenance -----------------------------------------------------------------

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule()
    def rescue_stale_heartbeats(self) -> None:
        rows = self.run(
            sql.JOB_RESCUE_STALE_HEARTBEAT,
            {
                "staleness_ms": 60_000,
                "instances_kept_ms": 300_000,
                "limit": 1000,
                "epoch": self.epoch,
            },
        )
        expected = {j.id for j in self.jobs.values() if j.state == "running" and j.stale}
        assert {row[0] for row in rows} == expected
        event(f"stale-heartbeat rescue: {len(expected)}")
        for job_id in expected:
            self.jobs[job_id].back_to_waiting()

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule()
    def rescue_past_deadline(self) -> None:
        rows = self.run(
            sql.JOB_RESCUE_PAST_DEADLINE, {"grace_ms": 1_000, "limit": 1000, "epoch": self.epoch}
        )
        expected = {j.id for j in self.jobs.values() if j.state == "running" and j.overdue}
        assert {row[0] for row in rows} == expected
        for job_id in expected:
            self.jobs[job_id].back_to_waiting()

    @precondition(
        lambda self: any(j.state in ("scheduled", "retryable") for j in self.jobs.values())
    )
    @rule()
    def promote(self) -> None:
        rows = self.run(sql.JOB_PROMOTE_DUE, {"limit": 1000, "epoch": self.epoch})
        due = [j for j in self.jobs.values() if j.state in ("scheduled", "retryable") and j.due]
        per_queue = {q: sum(1 for j in due if j.queue == q) for q in QUEUES}
        assert {row[0]: row[1] for row in rows} == {q: n for q, n in per_queue.items() if n}
        for job in due:
            job.state = "available"

    @precondition(lambda self: bool(self.jobs))
    @rule(query=st.sampled_from(["rescue_heartbeat", "rescue_deadline", "promote"]))
    def stale_leader_maintenance(self, query: str) -> None:
        """A former leader (an older lease epoch) runs maintenance: nothing happens."""
        statement, params = {
            "rescue_heartbeat": (
                sql.JOB_RESCUE_STALE_HEARTBEAT,
                {"staleness_ms": 60_000, "instances_kept_ms": 300_000},
            ),
            "rescue_deadline": (sql.JOB_RESCUE_PAST_DEADLINE, {"grace_ms": 1_000}),
            "promote": (sql.JOB_PROMOTE_DUE, {}),
        }[query]
        ids = sorted(self.jobs)
        before = self.rows(ids)
        assert self.run(statement, {**params, "limit": 1000, "epoch": self.epoch - 1}) == []
        assert self.rows(ids) == before

    # -- after every step ------------------------------------------------------------

    @invariant()
    def database_agrees_with_the_model(self) -> None:
        rows = self.conn.execute(
            "SELECT id, state::text, attempt, run_lease, attempted_at, max_attempts, "
            "jsonb_array_length(errors), finalized_at IS NOT NULL, heartbeat_at IS NOT NULL, "
            "queue, priority = original_priority FROM awa.jobs ORDER BY id"
        ).fetchall()
        assert [r[0] for r in rows] == sorted(self.jobs)
        for row in rows:
            job = self.jobs[row[0]]
            expected = (job.id, job.state, job.attempt, job.run_lease, job.attempted_at,
                        job.max_attempts, job.errors, job.state in FINAL,
                        job.state == "running", job.queue, True)  # fmt: skip
            assert row == expected, (row, job)

    @invariant()
    def every_transition_is_documented(self) -> None:
        rows = self.conn.execute(
            "SELECT old_state, new_state FROM public.chaos_transitions WHERE seq > %s",
            (self.seen_transitions,),
        ).fetchall()
        self.seen_transitions += len(rows)
        for transition in rows:
            assert transition in ALLOWED, f"undocumented transition {transition}"


def test_job_state_machine(db: psycopg.Connection[Any], sync_client: awa.Client) -> None:
    install_audit(db)
    JobStateMachine.conn = db
    JobStateMachine.client = sync_client
    run_state_machine_as_test(
        JobStateMachine,
        settings=settings(
            max_examples=150,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
