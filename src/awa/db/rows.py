"""Decoding result rows into awa's types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from psycopg import pq
from psycopg.rows import RowMaker

from awa.types import (
    Job,
    JobState,
    JobSummary,
    PoolMember,
    QueueLimits,
    QueueStat,
    RuntimeOverrides,
)

_JOB_FIELDS = (
    "id",
    "kind",
    "queue",
    "args",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_lease",
    "tags",
    "metadata",
    "progress",
    "errors",
    "created_at",
    "run_at",
    "attempted_at",
    "deadline_at",
    "finalized_at",
)
_STATES = {state.value: state for state in JobState}


class HasResult(Protocol):
    """What awa's row factories read: a psycopg cursor, or an :class:`awa.db.direct.Fetched`."""

    @property
    def pgresult(self) -> pq.abc.PGresult | None: ...


def job_rows(cursor: HasResult) -> RowMaker[Job[Any]]:
    """psycopg row factory: rows with the job columns (in any order, extras ignored) → Job.

    ``metadata`` and ``errors`` may come back NULL for empty (the claim does so to skip
    decoding ``{}`` and ``[]`` for every job); they become a fresh dict and list.
    """
    result = cursor.pgresult
    # Column names straight from the result: cheaper than building cursor.description.
    names = [] if result is None else [
        (result.fname(i) or b"").decode() for i in range(result.nfields)
    ]  # fmt: skip
    positions = [names.index(name) for name in _JOB_FIELDS]
    # Optional: statements written before ordering keys existed leave it out, and only
    # reads of a whole row (get_job, list_jobs) carry the callback's id.
    key_at = names.index("ordering_key") if "ordering_key" in names else None
    callback_at = names.index("callback_id") if "callback_id" in names else None
    # (the DLQ's rows have no callback_lease: a dead-lettered job waits on nothing)
    lease_at = names.index("callback_lease") if "callback_lease" in names else None
    run_lease_at = names.index("run_lease")
    state_at = names.index("state")
    metadata_at = _JOB_FIELDS.index("metadata")
    errors_at = _JOB_FIELDS.index("errors")

    def make(values: Sequence[Any]) -> Job[Any]:
        picked = [values[i] for i in positions]
        picked[4] = _STATES[values[state_at]]
        if picked[metadata_at] is None:
            picked[metadata_at] = {}
        if picked[errors_at] is None:
            picked[errors_at] = []
        if key_at is not None:
            picked.append(values[key_at])
        if callback_at is not None:
            if key_at is None:
                picked.append(None)
            lease = None if lease_at is None else values[lease_at]
            live = _live_callback(values[state_at], lease, values[run_lease_at])
            picked.append(str(values[callback_at]) if live else None)
        return Job(*picked)

    return make


def job_from_row(row: Mapping[str, Any]) -> Job[Any]:
    """A job from a dict row holding at least the job columns (extras are ignored)."""
    values = [row[name] for name in _JOB_FIELDS]
    values[4] = _STATES[values[4]]
    values.append(row.get("ordering_key"))
    callback_id = row.get("callback_id")
    live = callback_id is not None and _live_callback(
        row["state"], row.get("callback_lease"), row["run_lease"]
    )
    values.append(str(callback_id) if live else None)
    return Job(*values)


def _live_callback(state: str, callback_lease: int | None, run_lease: int) -> bool:
    """Whether a row's ``callback_id`` still answers: the job waits on it, or runs in the
    attempt that registered it. An attempt that ended any other way (returned, raised,
    rescued) leaves the column set, but its id resolves nothing (a review)."""
    if state == "waiting_external":
        return True
    return state == "running" and callback_lease == run_lease


def job_summary(row: Mapping[str, Any]) -> JobSummary:
    """A ``job_list_summaries`` dict row as a :class:`JobSummary`."""
    return JobSummary(**{**row, "state": _STATES[row["state"]]})


@dataclass(frozen=True, slots=True)
class FleetHold:
    """The last row of a coordinated claim: why the fleet held jobs back (``concurrency``,
    ``partition``, ``pool`` or ``rate``) and, for a rate limit, when the next token is due."""

    reason: str
    retry_in_ms: float | None


def claim_rows(cursor: HasResult) -> RowMaker[Job[Any] | FleetHold]:
    """Row factory of ``job_claim_coordinated``: job rows, then maybe one FleetHold."""
    jobs = job_rows(cursor)
    result = cursor.pgresult
    names = [] if result is None else [
        (result.fname(i) or b"").decode() for i in range(result.nfields)
    ]  # fmt: skip
    id_at, blocked_at, retry_at = (
        names.index("id"),
        names.index("blocked"),
        names.index("retry_in_ms"),
    )

    def make(values: Sequence[Any]) -> Job[Any] | FleetHold:
        if values[id_at] is None:
            return FleetHold(values[blocked_at], values[retry_at])
        return jobs(values)

    return make


@dataclass(frozen=True, slots=True)
class WriteRow:
    """One row of ``job_finalize_many``: an outcome that took effect (``applied``), or what
    a riding claim for ``claim_queue`` got — a job, or the fleet's hold."""

    applied: bool
    job_id: int | None
    claim_queue: str | None = None
    job: Job[Any] | None = None
    hold: FleetHold | None = None


def write_rows(cursor: HasResult) -> RowMaker[WriteRow]:
    """Row factory of ``job_finalize_many`` (awa.complete_and_claim)."""
    claimed = claim_rows(cursor)
    result = cursor.pgresult
    names = [] if result is None else [
        (result.fname(i) or b"").decode() for i in range(result.nfields)
    ]  # fmt: skip
    type_at, id_at, queue_at = (
        names.index("row_type"),
        names.index("id"),
        names.index("claim_queue"),
    )

    def make(values: Sequence[Any]) -> WriteRow:
        if values[type_at] == "applied":
            return WriteRow(True, values[id_at])
        row = claimed(values)
        if isinstance(row, FleetHold):
            return WriteRow(False, None, values[queue_at], hold=row)
        return WriteRow(False, row.id, values[queue_at], job=row)

    return make


def queue_stat(row: dict[str, Any]) -> QueueStat:
    """A ``queue_stats.sql`` row as a :class:`QueueStat`."""
    return QueueStat(**row)


def runtime_overrides(row: dict[str, Any] | None) -> RuntimeOverrides | None:
    """A ``queue_meta`` row's override columns, or None when no override is stored."""
    if row is None:
        return None
    return RuntimeOverrides(
        poll_interval_ms=row["override_poll_interval_ms"],
        claim_batch_size=row["override_claim_batch_size"],
        rate_limit=row["override_rate_limit"],
        deadline_ms=row["override_deadline_ms"],
        updated_at=row["overrides_updated_at"],
        max_workers=row.get("override_max_workers"),
        min_workers=row.get("override_min_workers"),
        weight=row.get("override_weight"),
    )


def control_limits(row: dict[str, Any] | None) -> QueueLimits | None:
    """The fleet limits in a ``queue_control_list`` row (None: the queue has none)."""
    if row is None or row.get("limits_updated_at") is None:
        return None
    return QueueLimits(
        queue=row["queue"],
        concurrency=row["limit_concurrency"],
        rate_limit=row["limit_rate_limit"],
        burst=row["limit_burst"],
        partition_by=row["limit_partition_by"],
        updated_at=row["limits_updated_at"],
    )


def control_pool_member(row: dict[str, Any] | None) -> PoolMember | None:
    """The fleet-pool membership in a ``queue_control_list`` row (None: not a member)."""
    if row is None or row.get("pool_weight") is None:
        return None
    return PoolMember(min_workers=row["pool_min_workers"], weight=row["pool_weight"])
