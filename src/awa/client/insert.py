"""Turning ``insert(...)`` arguments into rows: validation (I/O-free) and the two write paths.

``build_spec`` checks every argument and encodes args once; ``insert_one`` writes a single
row with ``INSERT … RETURNING``; ``insert_many`` reserves ids and streams rows with COPY.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString, TypedDict, TypeVar

from psycopg import AsyncConnection, Connection
from psycopg.errors import SerializationFailure
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from awa import validate
from awa.client import copy_rows
from awa.client.seat_outlook import SeatOutlook
from awa.client.unique import UniqueOpts, raise_naming_the_holder
from awa.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY
from awa.db import sql
from awa.db.direct import DirectStatement
from awa.db.errors import mapped
from awa.errors import DatabaseError, SerializationError, UniqueConflict, ValidationError
from awa.kinds import derive_kind
from awa.serialization import args_to_dict, encode_bounded, encode_json
from awa.tracing import context as trace_context
from awa.types import Job, JobState

MAX_TAGS = 20
MAX_TAG_LENGTH = 255
# Encoded args of one job. Every claim returns the args of up to claim_batch_size jobs in
# one response and holds them in memory while they run; beyond this, keep the payload
# elsewhere (object storage, a table of your own) and pass a reference.
MAX_ARGS_BYTES = 1_048_576


# Not frozen: one InsertSpec is built per job, and a frozen dataclass's __init__ (one
# object.__setattr__ per field) costs five times a plain one's (~4 µs for these fields).
@dataclass(slots=True)
class InsertSpec:
    """One validated job, ready to be written (treat as read-only)."""

    kind: str
    queue: str
    args: dict[str, Any]
    args_json: str
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    metadata_json: str
    run_at: datetime | None
    unique_key: bytes | None
    unique_states: str | None
    ordering_key: str | None

    def inserted(self, row: Sequence[Any] | None) -> Job[Any]:
        """The Job this spec became, from the row ``job_insert`` returns."""
        assert row is not None  # INSERT … RETURNING always yields the row
        job_id, state, created_at, run_at, _notified = row
        return _new_job(job_id, self, JobState(state), created_at, run_at)

    def params(self) -> dict[str, Any]:
        """Parameters of ``job_insert.sql``."""
        return {
            "kind": self.kind,
            "queue": self.queue,
            "args": self.args_json,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "tags": self.tags or "{}",  # an empty list would go through the array dumper
            "metadata": self.metadata_json,
            "run_at": self.run_at,
            "unique_key": self.unique_key,
            "unique_states": self.unique_states,
            "ordering_key": self.ordering_key,
        }


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError("tags", f"must be a list of strings, got {type(value).__name__}")
    if len(value) > MAX_TAGS:
        raise ValidationError("tags", f"at most {MAX_TAGS} tags allowed, got {len(value)}")
    return [validate.text("tags[]", tag, max_length=MAX_TAG_LENGTH) for tag in value]


def _metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", f"must be a dict, got {type(value).__name__}")
    return dict(value)


@dataclass(slots=True)
class _SharedOptions:
    """The options every job of one insert call shares, validated once per call."""

    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    metadata_json: str
    run_at: datetime | None
    unique: UniqueOpts | None
    ordering_key: str | None = None


def _shared_options(
    priority: int,
    max_attempts: int,
    tags: Sequence[str] | None,
    metadata: Mapping[str, Any] | None,
    run_at: datetime | None,
    unique_opts: Mapping[str, Any] | UniqueOpts | None,
    ordering_key: str | None = None,
) -> _SharedOptions:
    if (
        ordering_key is None
        and tags is None
        and metadata is None
        and run_at is None
        and unique_opts is None
        and type(priority) is int
        and priority == DEFAULT_PRIORITY
        and type(max_attempts) is int
        and max_attempts == DEFAULT_MAX_ATTEMPTS
    ):  # every option at its default: nothing to check (fresh containers: jobs own them)
        traced = trace_context.current()  # the producer's traceparent, inside an OTel span
        if traced is None:
            return _SharedOptions(DEFAULT_PRIORITY, DEFAULT_MAX_ATTEMPTS, [], {}, "{}", None, None)
        return _SharedOptions(
            DEFAULT_PRIORITY, DEFAULT_MAX_ATTEMPTS, [], traced, encode_json(traced), None, None
        )
    meta = _metadata(metadata)
    trace_context.carry(meta)  # the producer's traceparent, when inside an OTel span
    return _SharedOptions(
        priority=validate.integer("priority", priority, low=1, high=4),
        max_attempts=validate.integer("max_attempts", max_attempts, low=1, high=1000),
        tags=_tags(tags),
        metadata=meta,
        metadata_json=encode_bounded(meta, what="metadata") if meta else "{}",
        run_at=None if run_at is None else validate.aware_datetime("run_at", run_at),
        unique=None if unique_opts is None else UniqueOpts.parse(unique_opts),
        ordering_key=None if ordering_key is None else validate.ordering_key(ordering_key),
    )


def _kind_of(args: Any) -> str:
    if isinstance(args, Mapping):
        raise ValidationError("kind", "is required when args is a dict")
    return derive_kind(type(args))


@dataclass(frozen=True, slots=True)
class InsertItem:
    """One job of ``insert_many`` with options of its own; ``None`` takes the call's value.

    ``client.insert_many([InsertItem(SendEmail(...), queue="vip", priority=1),
    InsertItem(Report(...), run_at=tomorrow, unique_opts={"by_args": True}), Ping()])``
    """

    args: Any
    kind: str | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    tags: Sequence[str] | None = None
    metadata: Mapping[str, Any] | None = None
    run_at: datetime | None = None
    unique_opts: Mapping[str, Any] | None = None
    ordering_key: str | None = None


def _spec(args: Any, kind: str, queue: str, shared: _SharedOptions) -> InsertSpec:
    if isinstance(args, InsertItem):
        # A job with options of its own: stored as args it would be a job of kind
        # insert_item, the options inside, which no handler runs.
        raise ValidationError("args", "an awa.InsertItem goes in insert_many's list, not as args")
    payload = args_to_dict(args)
    args_json = encode_json(payload)
    if len(args_json) > MAX_ARGS_BYTES:  # ASCII: ensure_ascii makes characters bytes
        raise ValidationError(
            "args",
            f"encoded as {len(args_json)} bytes of JSON, over the limit of {MAX_ARGS_BYTES} "
            "(1 MiB): store large payloads elsewhere and pass a reference",
        )
    unique_key = unique_states = None
    if shared.unique is not None:
        unique_key = shared.unique.key(kind, queue, args_json)
        unique_states = shared.unique.states_mask()
    # Positional, in InsertSpec's field order (as in _new_job: keywords cost twice as much).
    # fmt: off
    return InsertSpec(
        kind, queue, payload, args_json, shared.priority, shared.max_attempts, shared.tags,
        shared.metadata, shared.metadata_json, shared.run_at, unique_key, unique_states,
        shared.ordering_key,
    )
    # fmt: on


class InsertOptions(TypedDict, total=False):
    """The options of one insert, as ``AsyncClient.insert`` takes them: what
    ``tx.insert``, ``awa.bridge.insert_job`` and Django's ``enqueue`` accept as keywords
    (so a checker catches a misspelt one)."""

    kind: str | None
    queue: str | None
    priority: int
    max_attempts: int
    tags: Sequence[str] | None
    metadata: Mapping[str, Any] | None
    run_at: datetime | None
    unique_opts: Mapping[str, Any] | UniqueOpts | None
    ordering_key: str | None


def build_spec(
    args: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    run_at: datetime | None = None,
    unique_opts: Mapping[str, Any] | UniqueOpts | None = None,
    ordering_key: str | None = None,
) -> InsertSpec:
    """Validate one job's arguments; every error names the field and its bound."""
    kind = validate.name("kind", _kind_of(args) if kind is None else kind)
    queue = validate.name("queue", "default" if queue is None else queue)
    shared = _shared_options(
        priority, max_attempts, tags, metadata, run_at, unique_opts, ordering_key
    )
    return _spec(args, kind, queue, shared)


def build_specs(
    args_list: Iterable[Any],
    *,
    kind: str | None = None,
    queue: str | None = None,
    default_queue: Callable[[type[Any], str | None], str] = lambda _type, _kind: "default",
    default_kind: Callable[[type[Any]], str | None] = lambda _type: None,
    first_index: int = 0,
    priority: int = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    run_at: datetime | None = None,
    unique_opts: Mapping[str, Any] | UniqueOpts | None = None,
    ordering_key: str | None = None,
) -> list[InsertSpec]:
    """Validate many jobs sharing one set of options: options are checked once, each
    job's args are encoded once. ``default_queue`` picks the queue when none is given,
    ``default_kind`` the kind (else derived from the args type)."""
    if isinstance(args_list, str | bytes | Mapping) or not isinstance(args_list, Iterable):
        raise ValidationError(
            "args_list", f"must be a list of job args, got {type(args_list).__name__}"
        )
    shared = _shared_options(
        priority, max_attempts, tags, metadata, run_at, unique_opts, ordering_key
    )
    fixed_kind = None if kind is None else validate.name("kind", kind)
    fixed_queue = None if queue is None else validate.name("queue", queue)
    per_type: dict[type[Any], tuple[str, str]] = {}
    specs = []
    for index, args in enumerate(args_list, start=first_index):
        try:
            cls = type(args)
            resolved = per_type.get(cls)
            if resolved is None:
                job_kind = fixed_kind or validate.name("kind", default_kind(cls) or _kind_of(args))
                job_queue = fixed_queue or validate.name("queue", default_queue(cls, job_kind))
                resolved = per_type[cls] = (job_kind, job_queue)
            specs.append(_spec(args, resolved[0], resolved[1], shared))
        except ValidationError as exc:  # say which element of the list is wrong
            raise ValidationError(f"args_list[{index}].{exc.field}", exc.reason) from None
        except SerializationError as exc:
            raise SerializationError(f"args_list[{index}]: {exc}") from None
    return specs


def alone(conn: Connection[Any] | AsyncConnection[Any]) -> bool:
    """True when a statement on ``conn`` is a transaction of its own (autocommit, none
    open): it may run again after a serialization failure."""
    return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


def guarded(conn: Connection[Any] | AsyncConnection[Any], spec: InsertSpec) -> bool:
    """True when ``spec`` may conflict inside a transaction (open now, or begun by the
    insert): it then runs in a savepoint."""
    return spec.unique_key is not None and not alone(conn)


def skips_duplicates(spec: InsertSpec, savepoint: bool) -> bool:
    """True when ``spec``'s insert skips a held key (``ON CONFLICT … DO NOTHING``, ADR
    0056) rather than failing on the index (which logs an ERROR in the server): a unique
    job inserted outside a caller's transaction. Inside one (``savepoint``) it keeps the
    index's error: above READ COMMITTED, ``ON CONFLICT`` fails on a key its snapshot
    cannot see with a serialization failure, not the UniqueConflict callers catch (a
    review). Jobs without a key never carry the clause: it costs every insert."""
    return spec.unique_key is not None and not savepoint


def skipped(spec: InsertSpec) -> UniqueConflict:
    """The conflict of an insert that skipped a held key (it returned no row)."""
    return UniqueConflict(
        "a job with the same unique key already exists in a guarded state",
        unique_key=spec.unique_key,
    )


R = TypeVar("R")

SERIALIZATION_TRIES = 3
"""How often an insert that is a transaction of its own is run when it fails to serialize."""


def run_again(exc: BaseException, tries_left: int) -> bool:
    """True when an insert run alone failed only to serialize, with tries left: under a
    stricter ``default_transaction_isolation`` than READ COMMITTED, a row another
    transaction changed after the statement's snapshot (a key's holder committed while it
    waited, a handoff seat taken or renewed) fails it; run again, it sees them. (Reported
    as a unique conflict, a new key's job was lost: a review.)"""
    return tries_left > 0 and isinstance(exc.__cause__, SerializationFailure)


async def _serialized(once: Callable[[], Awaitable[R]], tries: int) -> R:
    """``once()``, run up to ``tries`` times while it fails only to serialize (see
    :func:`run_again`); its other errors as they come."""
    tries_left = tries - 1
    while True:
        try:
            return await once()
        except DatabaseError as exc:
            if not run_again(exc, tries_left):
                raise
            tries_left -= 1


async def insert_one(conn: AsyncConnection[Any], spec: InsertSpec) -> Job[Any]:
    """Write one job on ``conn`` (any row factory: the cursor is its own); one round trip,
    three with a savepoint (see :func:`guarded`)."""
    tries = SERIALIZATION_TRIES if alone(conn) else 1
    return await _serialized(lambda: _insert_one(conn, spec), tries)


async def _insert_one(conn: AsyncConnection[Any], spec: InsertSpec) -> Job[Any]:
    savepoint = guarded(conn, spec)
    skip = skips_duplicates(spec, savepoint)
    async with conn.cursor(row_factory=tuple_row) as cur:
        if savepoint:
            await cur.execute(sql.INSERT_SAVEPOINT)
        try:
            with mapped():
                await cur.execute(sql.JOB_INSERT_UNIQUE if skip else sql.JOB_INSERT, spec.params())
                row = await cur.fetchone()
        except BaseException as exc:
            if savepoint and conn.info.transaction_status == TransactionStatus.INERROR:
                await cur.execute(sql.INSERT_SAVEPOINT_ROLLBACK)
            if isinstance(exc, UniqueConflict):  # the index's, or the DLQ's check (ADR 0051)
                await raise_naming_the_holder(conn, exc)
            raise
        if savepoint:
            await cur.execute(sql.INSERT_SAVEPOINT_RELEASE)
    if row is None:
        await raise_naming_the_holder(conn, skipped(spec))
    return spec.inserted(row)


_JOB_INSERT_DIRECT = DirectStatement("job_insert", sql.JOB_INSERT)
_JOB_INSERT_UNSEATED = DirectStatement("job_insert_unseated", sql.JOB_INSERT_UNSEATED)
_JOB_INSERT_UNIQUE = DirectStatement("job_insert_unique", sql.JOB_INSERT_UNIQUE)
_JOB_INSERT_UNIQUE_UNSEATED = DirectStatement(
    "job_insert_unique_unseated", sql.JOB_INSERT_UNIQUE_UNSEATED
)


async def insert_direct(
    conn: AsyncConnection[Any], spec: InsertSpec, outlook: SeatOutlook
) -> Job[Any]:
    """Write one job on ``conn``, an idle autocommit connection the caller holds alone
    (see :mod:`awa.db.direct`); one round trip. Looks for an idle worker's seat while
    ``outlook`` says it is worth it."""
    # A job with an ordering key never takes a seat: the statement without one is the same.
    looking = spec.ordering_key is None and outlook.worth_looking(spec.queue)
    skip = skips_duplicates(spec, savepoint=False)
    if skip:
        statement = _JOB_INSERT_UNIQUE if looking else _JOB_INSERT_UNIQUE_UNSEATED
    else:
        statement = _JOB_INSERT_DIRECT if looking else _JOB_INSERT_UNSEATED
    try:  # the first try inline (the single-insert hot path), any others by _serialized
        with mapped():
            rows = await statement.rows(conn, spec.params())
    except UniqueConflict as exc:  # the DLQ's check (ADR 0051)
        await raise_naming_the_holder(conn, exc)
    except DatabaseError as exc:
        if not run_again(exc, SERIALIZATION_TRIES - 1):
            raise
        rows = await _serialized(
            lambda: _direct_rows(conn, statement, spec), SERIALIZATION_TRIES - 1
        )
    if not rows:
        await raise_naming_the_holder(conn, skipped(spec))
    row = rows[0]
    _, state, _, _, notified = row
    if looking and state == "available":  # a job scheduled for later looked for nothing
        outlook.looked(spec.queue, found=notified is None)  # no notice: a seat took it
    return spec.inserted(row)


async def _direct_rows(
    conn: AsyncConnection[Any], statement: DirectStatement, spec: InsertSpec
) -> list[tuple[Any, ...]]:
    """The insert's rows, tried again after a serialization failure (see insert_direct)."""
    try:
        with mapped():
            return await statement.rows(conn, spec.params())
    except UniqueConflict as exc:
        await raise_naming_the_holder(conn, exc)


async def insert_many(conn: AsyncConnection[Any], specs: Sequence[InsertSpec]) -> list[Job[Any]]:
    """Write many jobs atomically: reserve ids, then COPY. Two round trips in all."""
    if not specs:
        return []
    try:
        return await _insert_many(conn, specs)
    except UniqueConflict as exc:  # the transaction (or its savepoint) is undone: look
        await raise_naming_the_holder(conn, exc)


async def _insert_many(conn: AsyncConnection[Any], specs: Sequence[InsertSpec]) -> list[Job[Any]]:
    with mapped():
        async with conn.transaction():
            queues = sorted({spec.queue for spec in specs})
            cur = await conn.execute(sql.JOB_RESERVE_IDS, {"n": len(specs), "queues": queues})
            row = await cur.fetchone()
            assert row is not None  # a SELECT without FROM always yields its row
            ids, now, _notified = row
            if all(map(_takes_defaults, specs)):
                line = _LineFormatter(copy_rows.timestamp(now), defaults=True)
                return await _copy(conn, sql.JOB_COPY_IN_DEFAULTS, specs, ids, now, line)
            line = _LineFormatter(copy_rows.timestamp(now))
            return await _copy(conn, sql.JOB_COPY_IN, specs, ids, now, line)


async def _copy(
    conn: AsyncConnection[Any],
    statement: LiteralString,
    specs: Sequence[InsertSpec],
    ids: Sequence[int],
    now: datetime,
    line: _LineFormatter,
) -> list[Job[Any]]:
    """Stream the rows through ``statement`` in chunks; the Jobs they became (in the
    order of ``specs``).

    Keyed rows (unique jobs) go in key order: two batches sharing keys in different
    orders each waited for a key the other had written, uncommitted — a deadlock (one
    failed with DeadlockDetected, a review), where in one order the second waits for the
    first and then gets its UniqueConflict."""
    rows: Iterable[tuple[InsertSpec, int]] = zip(specs, ids, strict=True)
    keyed = not all(spec.unique_key is None for spec in specs)
    if keyed:
        rows = sorted(rows, key=lambda row: row[0].unique_key or b"")
    jobs = []
    lines: list[str] = []
    async with conn.cursor().copy(statement) as copy:
        for spec, job_id in rows:
            scheduled = spec.run_at is not None and spec.run_at > now
            state = JobState.SCHEDULED if scheduled else JobState.AVAILABLE
            lines.append(line(job_id, spec, state))
            jobs.append(_new_job(job_id, spec, state, now, spec.run_at or now))
            if len(lines) == _COPY_CHUNK:
                await copy.write("".join(lines))
                lines.clear()
        if lines:
            await copy.write("".join(lines))
    if keyed:  # back to the caller's order
        position = {job_id: n for n, job_id in enumerate(ids)}
        jobs.sort(key=lambda job: position[job.id])
    return jobs


# Rows per write to the COPY: ~100 kB of small jobs, which fits the socket's send
# buffer, so a write returns at once and the next chunk is formatted while the server
# loads this one (5 000 rows, ~0.5 MB, made each write wait for the server: insert_many
# of 20 000 jobs took 7.7 µs a job against 6.6–7.2 with 1 000; bench/insert_path.py).
_COPY_CHUNK = 1_000


def _takes_defaults(spec: InsertSpec) -> bool:
    """True when the row ``job_copy_in_defaults`` writes is this job."""
    return (
        spec.run_at is None
        and spec.unique_key is None
        and spec.priority == DEFAULT_PRIORITY
        and spec.max_attempts == DEFAULT_MAX_ATTEMPTS
        and not spec.tags
        and spec.metadata_json == "{}"
        and spec.ordering_key is None
    )


class _LineFormatter:
    """``job_copy_in`` rows in COPY text format (columns in the statement's order), or
    with ``defaults`` the four columns of ``job_copy_in_defaults``.

    The jobs of one call share most columns (kind and queue per args type; priority,
    attempts, tags, metadata and run_at per call), so those stretches are escaped once
    and reused: a row is then the id, the args and the unique key around cached text.
    """

    def __init__(self, now_text: str, defaults: bool = False) -> None:
        self._now_text = now_text
        self._defaults = defaults
        self._heads: dict[tuple[str, str], str] = {}
        self._tails: dict[tuple[Any, ...], str] = {}

    def __call__(self, job_id: int, spec: InsertSpec, state: JobState) -> str:
        head = self._heads.get((spec.kind, spec.queue))
        if head is None:
            head = self._heads[(spec.kind, spec.queue)] = (
                f"\t{copy_rows.text(spec.kind)}\t{copy_rows.text(spec.queue)}\t"
            )
        if self._defaults:
            return f"{job_id}{head}{copy_rows.json_text(spec.args_json)}\n"
        key = (state, spec.priority, spec.max_attempts, id(spec.tags), spec.metadata_json,
               spec.run_at)  # fmt: skip
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = self._tail(spec, state)
        if spec.unique_key is None:
            unique = "\\N\t\\N\t"
        else:
            unique = (
                f"{copy_rows.bytea(spec.unique_key)}\t{copy_rows.optional(spec.unique_states)}\t"
            )
        ordering = copy_rows.optional(spec.ordering_key)
        return f"{job_id}{head}{copy_rows.json_text(spec.args_json)}{tail}{unique}{ordering}\n"

    def _tail(self, spec: InsertSpec, state: JobState) -> str:
        """The columns from state to run_at, between tabs."""
        run_at = self._now_text if spec.run_at is None else copy_rows.timestamp(spec.run_at)
        priority = str(spec.priority)
        columns = (
            state.value,
            priority,
            priority,
            str(spec.max_attempts),
            copy_rows.text_array(spec.tags),
            copy_rows.json_text(spec.metadata_json),
            run_at,
        )
        return "\t" + "\t".join(columns) + "\t"


def _new_job(
    job_id: int, spec: InsertSpec, state: JobState, now: datetime, run_at: datetime
) -> Job[Any]:
    # Positional, in Job's field order: with keywords, building 19 fields costs 0.9 µs
    # against 0.4 (CPython 3.11), once per job of every insert_many.
    # fmt: off
    return Job(
        job_id, spec.kind, spec.queue, spec.args, state, spec.priority,
        0, spec.max_attempts, 0,  # attempt, max_attempts, run_lease
        spec.tags, spec.metadata, None, [],  # tags, metadata, progress, errors
        now, run_at, None, None, None,  # created_at, run_at, attempted, deadline, finalized
        spec.ordering_key,
    )
    # fmt: on
