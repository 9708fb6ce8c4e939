"""Decoding result rows into awa's types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import AsyncCursor, Cursor
from psycopg.rows import RowMaker

from awa.types import Job, JobState, QueueStat, RuntimeOverrides

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


def job_rows(cursor: Cursor[Any] | AsyncCursor[Any]) -> RowMaker[Job[Any]]:
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
        return Job(*picked)

    return make


def job_from_row(row: Mapping[str, Any]) -> Job[Any]:
    """A job from a dict row holding at least the job columns (extras are ignored)."""
    values = [row[name] for name in _JOB_FIELDS]
    values[4] = _STATES[values[4]]
    return Job(*values)


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
    )
