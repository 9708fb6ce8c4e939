"""Helpers for testing code that uses awa, against a real database.

* :func:`work_one` claims one job of a queue with the real claim statement and runs it
  through the real executor and completer (outcome, retries, progress, hooks), without
  starting a worker; :func:`drain_queue` repeats it until the queue has nothing available.
* ``work_one(client, ArgsType, handler=...)`` runs the next job of that type with the
  given handler (default: the registered one), leaving the client's registered handlers
  as they are, and returns a :class:`WorkResult` naming the outcome.
* :func:`clean` deletes every row of awa's tables, for test isolation.
* :func:`inline` makes ``client.insert`` / ``insert_many`` run each inserted job at once
  and return it as it ended — handy in unit tests of code that enqueues.
* :func:`assert_enqueued` checks that a job was enqueued (args match as a subset).
* ``work_one_sync``, ``drain_queue_sync``, ``assert_enqueued_sync`` and ``clean_sync``
  are their blocking twins, for plain ``def`` tests with a sync :class:`~awa.Client`.

Example (pytest with pytest-asyncio)::

    async def test_signup_sends_welcome_email(client):
        await signup(client, "ada@example.com")          # enqueues SendEmail
        job = await awa.testing.assert_enqueued(client, kind="send_email",
                                                args={"to": "ada@example.com"})
        done = await awa.testing.work_one(client, queue="email")
        assert done is not None and done.state is awa.JobState.COMPLETED

Jobs left retryable or scheduled are not run again by these helpers: call
``client.retry(id)`` to make one available now.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from awa import validate
from awa.client.async_client import AsyncClient
from awa.client.sync_client import Client
from awa.config import DEFAULT_QUEUE, QueueConfig
from awa.db import sql
from awa.db.errors import mapped
from awa.db.lane import ConnectionLane
from awa.db.pool import Pool
from awa.db.rows import job_rows
from awa.errors import JobNotFound, SerializationError, ValidationError
from awa.kinds import derive_kind
from awa.maintenance import finished_counts
from awa.serialization import args_to_dict, encode_json
from awa.types import Job, JobState, StoredJob
from awa.worker.attempt import AttemptServices
from awa.worker.completer import Completer
from awa.worker.control import QueueControl
from awa.worker.dispatcher import Dispatcher
from awa.worker.executor import Executor
from awa.worker.observe import Fanout, Observer
from awa.worker.permits import QueuePermits
from awa.worker.registry import Handler, TaskRegistry
from awa.worker.results import Finalization

AnyClient = AsyncClient | Client
R = TypeVar("R")


def _core(client: AnyClient) -> AsyncClient:
    return client.async_client if isinstance(client, Client) else client


class _Launched(Observer):
    """Remembers the last job whose handler started, or which was handed back for want
    of a handler (then none started)."""

    def __init__(self) -> None:
        self.job: Job[Any] | None = None

    def job_started(self, job: Job[Any], pickup_latency_s: float) -> None:
        self.job = job

    def outcomes_applied(self, applied: Sequence[Finalization]) -> None:
        for outcome in applied:
            if outcome.handed_back:
                self.job = outcome.job


class _Runner:
    """An executor and completer like a worker's, for one job at a time."""

    def __init__(
        self,
        client: AsyncClient,
        pool: Pool,
        registry: TaskRegistry | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.client = client
        self.pool = pool
        self.launched = _Launched()
        self.observer = Fanout([self.launched, *client._observers, *observers])
        # Synchronous commits: an outcome's hooks fire before work_one() returns.
        self.completer = Completer(pool, observer=self.observer, synchronous_commit=True)
        self.claim_lane = ConnectionLane()
        registry = client.registry if registry is None else registry
        self.executor = Executor(registry, self.completer, 1, self.observer)
        services = AttemptServices(pool)
        services.bind(asyncio.get_running_loop())
        self.executor.services = services
        # One job at a time: the launched slot is shared, so concurrent inserts under
        # ``inline`` (asyncio.gather) must each see their own job's outcome.
        self._serial = asyncio.Lock()

    async def __aenter__(self) -> _Runner:
        self.completer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.claim_lane.close(self.pool)
        await self.completer.stop()
        self.executor.close()

    async def _settle(self) -> StoredJob | None:
        """Wait for the launched job's handler and its outcome; the job as it now is.
        (``launched`` is cleared before the launch, not here: with an eager task factory
        the handler has already started when the launch returns.)"""
        await self.executor.wait_idle(None)
        await self.completer.drain()
        job = self.launched.job
        if job is None:
            return None
        try:
            return await self.client.get_job(job.id)
        except JobNotFound:  # moved to the dead letter queue: the job as stored there
            try:
                return (await self.client.get_dlq_job(job.id)).job
            except JobNotFound:  # purged or retried from it meanwhile
                job.state = JobState.FAILED
                return job

    async def claim_and_run(self, queue: str) -> StoredJob | None:
        """One poll of a real dispatcher with one permit, then the job's outcome."""
        config = QueueConfig(queue, max_workers=1, claim_batch_size=1, deadline_ms=0)
        dispatcher = Dispatcher(
            queue,
            self.pool,
            QueuePermits(queue, 1),
            QueueControl(config),
            self.executor,
            self.observer,
            claim_lane=self.claim_lane,
        )
        async with self._serial:
            self.launched.job = None
            await dispatcher.poll_once()
            return await self._settle()

    async def run_by_id(self, job_id: int) -> StoredJob | None:
        """Claim one specific available job and run it."""
        async with self._serial:
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=job_rows)
                await cur.execute(sql.JOB_CLAIM_ONE, {"id": job_id})
                job = await cur.fetchone()
            if job is None:
                return None
            permits = QueuePermits(job.queue, 1)
            (permit,) = permits.split(permits.try_acquire(1), 1)
            self.launched.job = None
            self.executor.launch(job, permit, 0)
            return await self._settle()


@dataclass(frozen=True, slots=True)
class WorkResult:
    """What ``work_one(client, ArgsType, ...)`` did.

    ``outcome`` is ``"completed"``, ``"retried"``, ``"snoozed"``, ``"cancelled"``,
    ``"failed"``, ``"waiting_external"`` or ``"no_job"`` (then ``job`` is None and the
    result is falsy); ``job`` is the job as stored afterwards; ``error`` the message the
    outcome recorded (the exception, the ``Cancel`` reason), if any.
    """

    outcome: str
    job: StoredJob | None = None
    error: str | None = None

    def __bool__(self) -> bool:
        return self.outcome != "no_job"


_OUTCOME_OF_STATE = {
    JobState.COMPLETED: "completed",
    JobState.RETRYABLE: "retried",
    JobState.SCHEDULED: "snoozed",
    JobState.CANCELLED: "cancelled",
    JobState.FAILED: "failed",
    JobState.WAITING_EXTERNAL: "waiting_external",
}


class _LastOutcome(Observer):
    """Remembers the outcome the executor decided for the job it ran."""

    def __init__(self) -> None:
        self.outcome: Finalization | None = None

    def job_finished(self, job: Job[Any], outcome: Finalization | None, duration_s: float) -> None:
        self.outcome = outcome


async def _on_client_loop(client: AnyClient, coro: Coroutine[Any, Any, R]) -> R:
    """Run ``coro`` where the client's pool lives: a sync Client's private loop. Driver
    errors come out as awa's (a schema never migrated: ``SchemaNotMigrated``), as from the
    client's own calls."""
    if isinstance(client, Client):
        future = asyncio.run_coroutine_threadsafe(_mapped(coro), client._portal.loop)
        return await asyncio.wrap_future(future)
    return await _mapped(coro)


async def _mapped(coro: Coroutine[Any, Any, R]) -> R:
    with mapped():
        return await coro


def _one_task(
    core: AsyncClient,
    args_type: type[Any],
    handler: Handler | None,
    queue: str | None,
    kind: str | None,
) -> TaskRegistry:
    """A registry of its own holding one task, so the client's stays untouched."""
    if kind is None:
        if args_type is dict:
            raise ValidationError("kind", "is required when the args type is dict")
        kind = core.registry.default_kind(args_type) or derive_kind(args_type)
    kind = validate.name("kind", kind)
    registered = core.registry.get(kind)
    if handler is None:
        if registered is None:
            raise ValidationError(
                "handler", f"no handler is registered for {kind!r}: pass handler="
            )
        handler = registered.handler
    if queue is None:
        queue = registered.queue if registered is not None else DEFAULT_QUEUE
    registry = TaskRegistry()
    registry.register(args_type, handler, kind=kind, queue=queue)
    return registry


async def _work_type(
    core: AsyncClient,
    args_type: type[Any],
    handler: Handler | None,
    queue: str | None,
    kind: str | None,
) -> WorkResult:
    registry = _one_task(core, args_type, handler, queue, kind)
    (task,) = registry.tasks()
    pool = await core._get_pool()
    async with pool.connection() as conn:
        cur = await conn.execute(
            sql.JOB_NEXT_AVAILABLE_OF_KIND, {"queue": task.queue, "kind": task.kind}
        )
        row = await cur.fetchone()
    if row is None:
        return WorkResult("no_job")
    last = _LastOutcome()
    async with _Runner(core, pool, registry, [last]) as runner:
        job = await runner.run_by_id(row[0])
    if job is None:  # claimed by someone else in between
        return WorkResult("no_job")
    decided = last.outcome
    state = decided.state if decided is not None else job.state
    error = decided.error.get("error") if decided is not None and decided.error else None
    return WorkResult(_OUTCOME_OF_STATE.get(state, state.value), job, error)


@overload
async def work_one(client: AnyClient, queue: str = "default", /) -> StoredJob | None: ...
@overload
async def work_one(client: AnyClient, /, *, queue: str) -> StoredJob | None: ...
@overload
async def work_one(
    client: AnyClient,
    args_type: type[Any],
    /,
    *,
    handler: Handler | None = None,
    queue: str | None = None,
    kind: str | None = None,
) -> WorkResult: ...
async def work_one(
    client: AnyClient,
    target: str | type[Any] | None = None,
    /,
    *,
    handler: Handler | None = None,
    queue: str | None = None,
    kind: str | None = None,
) -> StoredJob | WorkResult | None:
    """Run one job to its outcome, through the real claim, executor and completer.

    ``work_one(client, "email")``: the next available job of the queue, with the
    registered handlers; returns the job as stored afterwards, or None when empty.

    ``work_one(client, SendEmail, handler=fake_send)``: the next available job of that
    type's kind (``kind=`` for dict args) in ``queue`` (default: the queue the type was
    registered on, else ``"default"``), run by ``handler`` (default: the registered one)
    without touching the client's registered handlers; returns a :class:`WorkResult`.
    """
    core = _core(client)
    return await _on_client_loop(client, _work_one(core, target, handler, queue, kind))


async def _work_one(
    core: AsyncClient,
    target: str | type[Any] | None,
    handler: Handler | None,
    queue: str | None,
    kind: str | None,
) -> StoredJob | WorkResult | None:
    if target is None or isinstance(target, str):
        if handler is not None or kind is not None:
            raise ValidationError("handler", "handler= and kind= go with an args type")
        async with _Runner(core, await core._get_pool()) as runner:
            return await runner.claim_and_run(target or queue or DEFAULT_QUEUE)
    return await _work_type(core, target, handler, queue, kind)


async def clean(client: AnyClient) -> int:
    """Delete every job, dead letter, queue control row, cron schedule and runtime instance
    (the schema stays): a clean slate for the next test. Returns how many jobs went.

    A worker this client runs stored its cron schedules and its queues' ``dlq`` flags at
    ``start()`` and does not store them again: they are stored again here, or its cron
    would stop firing and its failed jobs stop reaching the dead letter queue."""
    core = _core(client)

    async def run() -> int:
        pool = await core._get_pool()
        async with pool.connection() as conn:
            cur = await conn.execute(sql.SCHEMA_CLEAN)
            row = await cur.fetchone()
        # The deletes appended their changes to the finished counts (ADR 0054): folded,
        # they cancel out and both tables are empty too.
        await finished_counts.fold(pool)
        worker = core._worker
        if worker is not None:
            await worker.upkeep.store_registrations()
        return int(row[0]) if row is not None else 0

    return await _on_client_loop(client, run())


async def drain_queue(
    client: AnyClient, queue: str = "default", *, limit: int = 10_000
) -> list[StoredJob]:
    """Run available jobs of ``queue`` one by one until none is left (at most ``limit``).
    (Not ``client.drain_queue(queue)``, an operator's call that *cancels* them.)"""
    core = _core(client)

    async def run() -> list[StoredJob]:
        done: list[StoredJob] = []
        async with _Runner(core, await core._get_pool()) as runner:
            while len(done) < limit:
                job = await runner.claim_and_run(queue)
                if job is None:
                    break
                done.append(job)
        return done

    return await _on_client_loop(client, run())


@contextlib.asynccontextmanager
async def inline(client: AnyClient) -> AsyncIterator[None]:
    """Within the block, every job ``client.insert``/``insert_many`` enqueues runs at once.

    ``insert`` returns the job as it ended (``insert_many`` a list of them). Jobs inserted
    inside ``client.transaction()`` are not run (they are not committed yet); scheduled
    jobs (``run_at`` in the future) are left for later.
    """
    if isinstance(client, Client):
        # Its inserts block on its private loop, where the runner would have to run.
        raise ValidationError(
            "client", "inline needs an awa.AsyncClient (a sync Client's inserts would wait "
            "for themselves); use work_one or drain_queue with a sync Client"
        )  # fmt: skip
    core = _core(client)
    async with _Runner(core, await core._get_pool()) as runner:

        async def run(job: Job[Any]) -> StoredJob:
            if job.state is not JobState.AVAILABLE:
                return job
            done = await runner.run_by_id(job.id)
            return done if done is not None else job

        previous, core._after_insert = core._after_insert, run
        try:
            yield
        finally:
            core._after_insert = previous


def _as_stored(args: Any) -> dict[str, Any]:
    """The expected ``args`` as insert stores them. A dataclass or pydantic instance is
    encoded exactly as insert encodes it; a mapping value by value (tuples as lists,
    nested dataclasses as dicts, enums as values), a value JSON cannot hold as it is."""
    if not isinstance(args, Mapping):
        stored: dict[str, Any] = json.loads(encode_json(args_to_dict(args)))
        return stored
    return {key: _as_json(value) for key, value in args.items()}


def _as_json(value: Any) -> Any:
    try:
        return json.loads(encode_json(value))
    except (SerializationError, ValidationError):
        return value


def _matches(job: Job[Any], args: Mapping[str, Any] | None) -> bool:
    if args is None:
        return True
    stored = job.args if isinstance(job.args, Mapping) else {}
    return all(k in stored and stored[k] == v for k, v in args.items())


@overload
async def assert_enqueued(  # type: ignore[overload-overlap]  # 0 asserts there is none
    client: AnyClient,
    *,
    kind: str | None = None,
    args: Any = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    count: Literal[0],
) -> None: ...


@overload
async def assert_enqueued(
    client: AnyClient,
    *,
    kind: str | None = None,
    args: Any = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    count: int | None = None,
) -> StoredJob: ...


async def assert_enqueued(
    client: AnyClient,
    *,
    kind: str | None = None,
    args: Any = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    count: int | None = None,
) -> StoredJob | None:
    """Assert a matching job exists (``count``: exactly that many); returns the newest
    (None when ``count=0`` asserted that there is none).

    ``args`` matches as a subset of the stored args: a mapping (its values compared as
    insert would store them), or the dataclass or pydantic instance that was inserted
    (which also stands for its kind, as insert derives it, unless ``kind=`` is given).
    ``state`` defaults to any state.
    Raises AssertionError describing what was found instead.
    """
    if kind is None and queue is None and args is None:
        raise ValidationError("kind", "assert_enqueued needs kind=, queue= or args=")
    core = _core(client)
    if kind is None and args is not None and not isinstance(args, Mapping):
        # An instance names its kind as insert would: a Charge is not a Refund whose
        # fields happen to be equal.
        kind = core.registry.default_kind(type(args)) or derive_kind(type(args))
    jobs = await _on_client_loop(
        client, core.list_jobs(state=state, kind=kind, queue=queue, limit=10_000)
    )
    expected = None if args is None else _as_stored(args)
    matching = [job for job in jobs if _matches(job, expected)]
    wanted = f"kind={kind!r} queue={queue!r} args={args!r} state={state!r}"
    if count is not None and len(matching) != count:
        raise AssertionError(f"expected {count} job(s) with {wanted}, found {len(matching)}")
    if count == 0:
        return None
    if not matching:
        seen = ", ".join(f"#{j.id} {j.kind}@{j.queue} {j.args!r}" for j in jobs[:10]) or "none"
        raise AssertionError(f"no job enqueued with {wanted}; candidates: {seen}")
    return matching[0]


# -- blocking twins, for tests that are plain functions ----------------------------------
# The helpers above are coroutines: called without ``await`` in a plain test they return
# one that never runs, and the test passes having checked nothing (a review). These run
# them on a sync Client's own loop and wait.


def _blocking(client: Client, name: str, coro: Coroutine[Any, Any, R]) -> R:
    if not isinstance(client, Client):
        coro.close()
        raise ValidationError(
            "client", f"{name}_sync takes a sync awa.Client; with an AsyncClient, "
            f"await awa.testing.{name}(...)"
        )  # fmt: skip
    return client._portal.call(_mapped(coro))


@overload
def work_one_sync(client: Client, queue: str = "default", /) -> StoredJob | None: ...
@overload
def work_one_sync(client: Client, /, *, queue: str) -> StoredJob | None: ...
@overload
def work_one_sync(
    client: Client,
    args_type: type[Any],
    /,
    *,
    handler: Handler | None = None,
    queue: str | None = None,
    kind: str | None = None,
) -> WorkResult: ...
def work_one_sync(
    client: Client,
    target: str | type[Any] | None = None,
    /,
    *,
    handler: Handler | None = None,
    queue: str | None = None,
    kind: str | None = None,
) -> StoredJob | WorkResult | None:
    """:func:`work_one`, blocking, with a sync :class:`~awa.Client`."""
    core = _core(client)
    return _blocking(client, "work_one", _work_one(core, target, handler, queue, kind))


def drain_queue_sync(
    client: Client, queue: str = "default", *, limit: int = 10_000
) -> list[StoredJob]:
    """:func:`drain_queue`, blocking, with a sync :class:`~awa.Client`."""
    core = _core(client)
    return _blocking(client, "drain_queue", drain_queue(core, queue, limit=limit))


def clean_sync(client: Client) -> int:
    """:func:`clean`, blocking, with a sync :class:`~awa.Client`."""
    core = _core(client)
    return _blocking(client, "clean", clean(core))


@overload
def assert_enqueued_sync(  # type: ignore[overload-overlap]  # 0 asserts there is none
    client: Client,
    *,
    kind: str | None = None,
    args: Any = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    count: Literal[0],
) -> None: ...
@overload
def assert_enqueued_sync(
    client: Client,
    *,
    kind: str | None = None,
    args: Any = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    count: int | None = None,
) -> StoredJob: ...
def assert_enqueued_sync(
    client: Client,
    *,
    kind: str | None = None,
    args: Any = None,
    queue: str | None = None,
    state: JobState | str | None = None,
    count: int | None = None,
) -> StoredJob | None:
    """:func:`assert_enqueued`, blocking, with a sync :class:`~awa.Client`."""
    core = _core(client)
    coro = assert_enqueued(core, kind=kind, args=args, queue=queue, state=state, count=count)
    return _blocking(client, "assert_enqueued", coro)


__all__ = [
    "WorkResult",
    "assert_enqueued",
    "assert_enqueued_sync",
    "clean",
    "clean_sync",
    "drain_queue",
    "drain_queue_sync",
    "inline",
    "work_one",
    "work_one_sync",
]
