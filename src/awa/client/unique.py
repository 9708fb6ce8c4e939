"""Unique jobs: the key that identifies "the same job" and the states it is guarded in."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, LiteralString, NoReturn

import psycopg
from psycopg import AsyncConnection, Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from awa import validate
from awa.db import sql
from awa.db.errors import mapped
from awa.errors import UniqueConflict, ValidationError
from awa.types import JobState

logger = logging.getLogger("awa")

# The states a job moves between on its own (the claim, a retry, a snooze, a rescue, a
# callback's wait and its answer). A key must be guarded in all of them: a duplicate let
# in while the first job sat in one left out would collide when that job moved on, and
# the move — a completion, a promotion, a rescue — would fail, for every job written with
# it. Leaving a terminal state (a retry of a failed job) is an operator's act, which may
# be refused with UniqueConflict.
REQUIRED_UNIQUE_STATES = (
    JobState.SCHEDULED,
    JobState.AVAILABLE,
    JobState.RUNNING,
    JobState.RETRYABLE,
    JobState.WAITING_EXTERNAL,
)
DEFAULT_UNIQUE_STATES = (*REQUIRED_UNIQUE_STATES, JobState.COMPLETED)
_STATE_ORDER = list(JobState)  # bit i of the mask is the i-th state of the SQL enum
_KEYS = {"by_args", "by_queue", "by_period", "states"}
MIN_PERIOD_S = 0.001


@dataclass(frozen=True, slots=True)
class UniqueOpts:
    """Which parts of a job make it unique, and in which states the guard holds."""

    by_args: bool = True
    by_queue: bool = False
    by_period: float | None = None
    states: tuple[JobState, ...] = DEFAULT_UNIQUE_STATES

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | UniqueOpts) -> UniqueOpts:
        """Validate the ``unique_opts`` dict of the public API."""
        if isinstance(raw, UniqueOpts):
            return raw
        if not isinstance(raw, Mapping):
            raise ValidationError("unique_opts", f"must be a dict, got {type(raw).__name__}")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ValidationError("unique_opts", f"unknown key(s): {', '.join(sorted(unknown))}")
        by_args = raw.get("by_args", True)
        by_queue = raw.get("by_queue", False)
        for name, flag in (("by_args", by_args), ("by_queue", by_queue)):
            if not isinstance(flag, bool):
                raise ValidationError(f"unique_opts.{name}", f"must be a bool, got {flag!r}")
        period = raw.get("by_period")
        if period is not None:
            period = validate.number("unique_opts.by_period", period, above=0)
            if period < MIN_PERIOD_S:  # tinier periods overflow the bucket number in key()
                raise ValidationError(
                    "unique_opts.by_period", f"must be >= {MIN_PERIOD_S} seconds, got {period!r}"
                )
        states = cls._parse_states(raw.get("states", DEFAULT_UNIQUE_STATES))
        return cls(by_args=by_args, by_queue=by_queue, by_period=period, states=states)

    @staticmethod
    def _parse_states(raw: Any) -> tuple[JobState, ...]:
        if isinstance(raw, str) or not hasattr(raw, "__iter__"):
            raise ValidationError("unique_opts.states", f"must be a list of states, got {raw!r}")
        states = []
        for value in raw:
            try:
                states.append(JobState(value))
            except ValueError:
                valid = ", ".join(s.value for s in JobState)
                raise ValidationError(
                    "unique_opts.states", f"unknown state {value!r} (valid: {valid})"
                ) from None
        missing = [s.value for s in REQUIRED_UNIQUE_STATES if s not in states]
        if missing:
            raise ValidationError(
                "unique_opts.states",
                f"must include {', '.join(s.value for s in REQUIRED_UNIQUE_STATES)} (a job "
                "moves between these on its own, and a duplicate admitted while it sat in "
                f"one left out would collide when it moved on); missing {', '.join(missing)}",
            )
        return tuple(states)

    def states_mask(self) -> str:
        """The bit(8) literal for ``awa.job_state_in_bitmask``."""
        return "".join("1" if state in self.states else "0" for state in _STATE_ORDER)

    def key(self, kind: str, queue: str, args_json: str, now: float | None = None) -> bytes:
        """SHA-256 over the parts that identify this job (args compared canonically)."""
        parts = [f"kind={kind}"]
        if self.by_queue:
            parts.append(f"queue={queue}")
        if self.by_args:
            parts.append(
                "args=" + json.dumps(json.loads(args_json), sort_keys=True, separators=(",", ":"))
            )
        if self.by_period is not None:
            instant = time.time() if now is None else now
            parts.append(f"period={int(instant // self.by_period)}")
        return hashlib.sha256("\x1f".join(parts).encode()).digest()


def _lookable(conn: Connection[Any] | AsyncConnection[Any], conflict: UniqueConflict) -> bool:
    """The key is known and the connection can still read (the conflict aborted no
    transaction: the insert ran alone, in a savepoint, or its transaction was undone)."""
    return (
        conflict.unique_key is not None
        and conn.info.transaction_status != TransactionStatus.INERROR
    )


def _raise(conflict: UniqueConflict, holder: tuple[int | None] | None) -> NoReturn:
    """``conflict`` naming its holder, raised from it; or, none found, ``conflict`` itself
    (its psycopg cause kept: never an exception that is its own cause)."""
    if holder is None or holder[0] is None:
        raise conflict
    raise conflict.held_by(holder[0]) from conflict


async def raise_naming_the_holder(conn: AsyncConnection[Any], conflict: UniqueConflict) -> NoReturn:
    """Raise ``conflict``, naming the job that holds the key when ``conn`` can still look
    it up (one read on jobs_unique_idx, only after a conflict; a failed look adds nothing)."""
    holder = None
    if _lookable(conn, conflict):
        with contextlib.suppress(psycopg.Error):
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(sql.JOB_UNIQUE_HOLDER, {"unique_key": conflict.unique_key})
                holder = await cur.fetchone()
    _raise(conflict, holder)


def raise_naming_the_holder_sync(conn: Connection[Any], conflict: UniqueConflict) -> NoReturn:
    """:func:`raise_naming_the_holder`'s blocking twin (the bridge's psycopg connections)."""
    holder = None
    if _lookable(conn, conflict):
        with contextlib.suppress(psycopg.Error), conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql.JOB_UNIQUE_HOLDER, {"unique_key": conflict.unique_key})
            holder = cur.fetchone()
    _raise(conflict, holder)


async def warn_held_back(
    conn: AsyncConnection[Any],
    query: LiteralString,
    params: Mapping[str, Any],
    *,
    retry: str,
    left: str,
    item: str,
) -> None:
    """After a retry that skips what would duplicate a job (``retry_failed``, the DLQ's),
    warn naming each ``item`` it left (``query``: at most 20, with the job guarding its
    key, and how many in all), or nothing when it left none."""
    with mapped():
        held = await (await conn.execute(query, params)).fetchall()
    if held:
        named = ", ".join(f"{item} {row} (key held by job {holder})" for row, holder, _ in held)
        more = held[0][2] - len(held)
        logger.warning(
            "%s left %s%s %s: another job guards the unique key, so a retry would duplicate "
            "it; retry again once that job is done",
            retry, named, f" and {more} more" if more else "", left,
        )  # fmt: skip
