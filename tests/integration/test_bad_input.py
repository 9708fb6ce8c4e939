"""Bad input to every public function of AsyncClient and Client.

Wrong types, values out of range, unknown queues, ids, schedules and callbacks,
oversized and unstorable payloads, malformed database URLs and cron expressions: each
raises a typed awa error that names the problem (the field, or what was not found), and
leaves every table of the ``awa`` schema exactly as it was.

The sync ``Client`` has the same method names, so one table of cases runs through both.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import awa
from awa.client.insert import MAX_ARGS_BYTES
from awa.serialization import MAX_METADATA_BYTES
from tests.helpers import FAST_WORKER, wait_for, wait_until

NOW = datetime.now(UTC)
TEN_MB = {"blob": "x" * 10_000_000}
BIG_METADATA = {"blob": "x" * MAX_METADATA_BYTES}  # its JSON is a few bytes over the limit
UNKNOWN = 987_654


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def handler(job: awa.Job[Any]) -> None:
    return None


@dataclass(frozen=True)
class Case:
    """``call(client)`` must raise ``error`` whose field (or message) names ``names``."""

    id: str
    call: Callable[[Any], Any]
    error: type[Exception]
    names: str


C = Case
V, S = awa.ValidationError, awa.SerializationError

CASES = [
    # -- insert: args ------------------------------------------------------------------
    C("args list", lambda c: c.insert([1, 2], kind="k"), S, "args"),
    C("args object", lambda c: c.insert(object(), kind="k"), S, "args"),
    C("args unencodable value", lambda c: c.insert({"x": object()}, kind="k"), S, "args"),
    C("args nan", lambda c: c.insert({"x": math.nan}, kind="k"), S, "args"),
    C("args tuple key", lambda c: c.insert({(1, 2): 1}, kind="k"), S, "args"),
    C("args NUL", lambda c: c.insert({"x": "a\x00b"}, kind="k"), V, "args"),
    C("args NUL key", lambda c: c.insert({"x\x00": 1}, kind="k"), V, "args"),
    C("args lone surrogate", lambda c: c.insert({"x": "\ud800"}, kind="k"), V, "args"),
    C("args nested too deep", lambda c: c.insert(deep(100_000), kind="k"), S, "args"),
    C("args nested past what awa reads", lambda c: c.insert(deep(300), kind="k"), V, "args"),
    C("args 10 MB", lambda c: c.insert(TEN_MB, kind="k"), V, "args"),
    C("dict args without kind", lambda c: c.insert({}), V, "kind"),
    # -- insert: options ---------------------------------------------------------------
    C("kind empty", lambda c: c.insert({}, kind=""), V, "kind"),
    C("kind int", lambda c: c.insert({}, kind=5), V, "kind"),
    C("kind too long", lambda c: c.insert({}, kind="k" * 201), V, "kind"),
    C("kind NUL", lambda c: c.insert({}, kind="a\x00"), V, "kind"),
    C("kind surrogate", lambda c: c.insert({}, kind="bad\ud800"), V, "kind"),
    C("queue surrogate", lambda c: c.insert({}, kind="k", queue="q\udcff"), V, "queue"),
    C("insert_many queue surrogate", lambda c: c.insert_many([{}], kind="k", queue="q\udcff"),
      V, "queue"),
    C("queue empty", lambda c: c.insert({}, kind="k", queue=""), V, "queue"),
    C("queue list", lambda c: c.insert({}, kind="k", queue=["q"]), V, "queue"),
    C("queue too long", lambda c: c.insert({}, kind="k", queue="q" * 201), V, "queue"),
    C("priority 0", lambda c: c.insert({}, kind="k", priority=0), V, "priority"),
    C("priority 5", lambda c: c.insert({}, kind="k", priority=5), V, "priority"),
    C("priority str", lambda c: c.insert({}, kind="k", priority="1"), V, "priority"),
    C("priority bool", lambda c: c.insert({}, kind="k", priority=True), V, "priority"),
    C("priority float", lambda c: c.insert({}, kind="k", priority=2.0), V, "priority"),
    C("max_attempts 0", lambda c: c.insert({}, kind="k", max_attempts=0), V, "max_attempts"),
    C("max_attempts 1001", lambda c: c.insert({}, kind="k", max_attempts=1001), V,
      "max_attempts"),
    C("max_attempts None", lambda c: c.insert({}, kind="k", max_attempts=None), V,
      "max_attempts"),
    C("tags str", lambda c: c.insert({}, kind="k", tags="a,b"), V, "tags"),
    C("tags int", lambda c: c.insert({}, kind="k", tags=[1]), V, "tags"),
    C("tags 21", lambda c: c.insert({}, kind="k", tags=["t"] * 21), V, "tags"),
    C("tag too long", lambda c: c.insert({}, kind="k", tags=["t" * 256]), V, "tags"),
    C("tag NUL", lambda c: c.insert({}, kind="k", tags=["a\x00"]), V, "tags"),
    C("tag surrogate", lambda c: c.insert({}, kind="k", tags=["\udfff"]), V, "tags"),
    C("metadata list", lambda c: c.insert({}, kind="k", metadata=[1]), V, "metadata"),
    C("metadata object", lambda c: c.insert({}, kind="k", metadata={"a": object()}), S,
      "metadata"),
    C("metadata NUL", lambda c: c.insert({}, kind="k", metadata={"a": "\x00"}), V, "metadata"),
    C("metadata 20 MB", lambda c: c.insert({}, kind="k", metadata={"a": "x" * 20_000_000}), V,
      "metadata"),
    C("metadata over 64 KiB", lambda c: c.insert({}, kind="k", metadata=BIG_METADATA), V,
      "metadata"),
    C("insert_many metadata", lambda c: c.insert_many([{}], kind="k", metadata=BIG_METADATA),
      V, "metadata"),
    C("run_at str", lambda c: c.insert({}, kind="k", run_at="2030-01-01"), V, "run_at"),
    C("run_at naive", lambda c: c.insert({}, kind="k", run_at=datetime(2030, 1, 1)), V,
      "run_at"),
    C("unique_opts str", lambda c: c.insert({}, kind="k", unique_opts="yes"), V, "unique_opts"),
    C("unique_opts key", lambda c: c.insert({}, kind="k", unique_opts={"bogus": 1}), V,
      "unique_opts"),
    C("unique by_args", lambda c: c.insert({}, kind="k", unique_opts={"by_args": "yes"}), V,
      "unique_opts.by_args"),
    C("unique states", lambda c: c.insert({}, kind="k", unique_opts={"states": ["nope"]}), V,
      "unique_opts.states"),
    C("unique no states", lambda c: c.insert({}, kind="k", unique_opts={"states": []}), V,
      "unique_opts.states"),
    C("unique period 0", lambda c: c.insert({}, kind="k", unique_opts={"by_period": 0}), V,
      "unique_opts.by_period"),
    C("unique period tiny", lambda c: c.insert({}, kind="k", unique_opts={"by_period": 1e-300}),
      V, "unique_opts.by_period"),
    C("unique period nan", lambda c: c.insert({}, kind="k", unique_opts={"by_period": math.nan}),
      V, "unique_opts.by_period"),
    # -- insert_many (all or nothing) -------------------------------------------------
    C("insert_many None", lambda c: c.insert_many(None, kind="k"), V, "args_list"),
    C("insert_many dict", lambda c: c.insert_many({"a": 1}, kind="k"), V, "args_list"),
    C("insert_many str", lambda c: c.insert_many("abc", kind="k"), V, "args_list"),
    C("insert_many one bad", lambda c: c.insert_many([{"ok": 1}, [1]], kind="k"), S, "args"),
    C("insert_many NUL", lambda c: c.insert_many([{"ok": 1}, {"x": "\x00"}], kind="k"), V,
      "args"),
    C("insert_many 10 MB", lambda c: c.insert_many([{"ok": 1}, TEN_MB], kind="k"), V, "args"),
    C("insert_many priority", lambda c: c.insert_many([{}], kind="k", priority=9), V,
      "priority"),
    # -- jobs by id ----------------------------------------------------------------------
    C("get_job 0", lambda c: c.get_job(0), V, "id"),
    C("get_job -1", lambda c: c.get_job(-1), V, "id"),
    C("get_job str", lambda c: c.get_job("1"), V, "id"),
    C("get_job None", lambda c: c.get_job(None), V, "id"),
    C("get_job float", lambda c: c.get_job(1.0), V, "id"),
    C("get_job unknown", lambda c: c.get_job(UNKNOWN), awa.JobNotFound, str(UNKNOWN)),
    C("get_job past bigint", lambda c: c.get_job(2**63), awa.JobNotFound, str(2**63)),
    C("explain 0", lambda c: c.explain(0), V, "id"),
    C("explain str", lambda c: c.explain("1"), V, "id"),
    C("explain unknown", lambda c: c.explain(UNKNOWN), awa.JobNotFound, str(UNKNOWN)),
    C("explain past bigint", lambda c: c.explain(2**63), awa.JobNotFound, str(2**63)),
    C("explain_queue blank", lambda c: c.explain_queue(""), V, "queue"),
    C("cancel 0", lambda c: c.cancel(0), V, "id"),
    C("cancel unknown", lambda c: c.cancel(UNKNOWN), awa.JobNotFound, str(UNKNOWN)),
    C("retry str", lambda c: c.retry("x"), V, "id"),
    C("retry unknown", lambda c: c.retry(UNKNOWN), awa.JobNotFound, str(UNKNOWN)),
    C("list_jobs state", lambda c: c.list_jobs(state="nope"), V, "state"),
    C("list_jobs limit 0", lambda c: c.list_jobs(limit=0), V, "limit"),
    C("list_jobs limit 10001", lambda c: c.list_jobs(limit=10_001), V, "limit"),
    C("list_jobs limit str", lambda c: c.list_jobs(limit="5"), V, "limit"),
    C("list_jobs kind", lambda c: c.list_jobs(kind=""), V, "kind"),
    C("list_jobs queue", lambda c: c.list_jobs(queue=5), V, "queue"),
    C("cancel_by_unique_key kind", lambda c: c.cancel_by_unique_key({}), V, "kind"),
    C("cancel_by_unique_key opts",
      lambda c: c.cancel_by_unique_key({}, kind="k", unique_opts={"nope": 1}), V,
      "unique_opts"),
    C("cancel_by_unique_key queue", lambda c: c.cancel_by_unique_key({}, kind="k", queue=""),
      V, "queue"),
    C("retry_failed no filter", lambda c: c.retry_failed(), V, "kind"),
    C("retry_failed kind", lambda c: c.retry_failed(kind=""), V, "kind"),
    C("retry_failed queue", lambda c: c.retry_failed(queue=3), V, "queue"),
    C("discard_failed None", lambda c: c.discard_failed(None), V, "kind"),
    C("discard_failed empty", lambda c: c.discard_failed(""), V, "kind"),
    # -- queues ------------------------------------------------------------------------
    C("pause empty", lambda c: c.pause_queue(""), V, "queue"),
    C("pause too long", lambda c: c.pause_queue("q" * 201), V, "queue"),
    C("pause paused_by", lambda c: c.pause_queue("q", paused_by=""), V, "paused_by"),
    C("pause paused_by int", lambda c: c.pause_queue("q", paused_by=7), V, "paused_by"),
    C("pause paused_by surrogate", lambda c: c.pause_queue("q", paused_by="ops\ud800"), V,
      "paused_by"),
    C("pause queue surrogate", lambda c: c.pause_queue("q\udcff"), V, "queue"),
    C("resume None", lambda c: c.resume_queue(None), V, "queue"),
    C("drain int", lambda c: c.drain_queue(5), V, "queue"),
    C("overrides queue", lambda c: c.set_runtime_overrides("", rate_limit=1), V, "queue"),
    C("overrides poll 0", lambda c: c.set_runtime_overrides("q", poll_interval_ms=0), V,
      "poll_interval_ms"),
    C("overrides poll str", lambda c: c.set_runtime_overrides("q", poll_interval_ms="5"), V,
      "poll_interval_ms"),
    C("overrides poll 2**31", lambda c: c.set_runtime_overrides("q", poll_interval_ms=2**31),
      V, "poll_interval_ms"),
    C("overrides batch 0", lambda c: c.set_runtime_overrides("q", claim_batch_size=0), V,
      "claim_batch_size"),
    C("overrides rate 0", lambda c: c.set_runtime_overrides("q", rate_limit=0), V,
      "rate_limit"),
    C("overrides rate nan", lambda c: c.set_runtime_overrides("q", rate_limit=math.nan), V,
      "rate_limit"),
    C("overrides rate inf", lambda c: c.set_runtime_overrides("q", rate_limit=math.inf), V,
      "rate_limit"),
    C("overrides rate str", lambda c: c.set_runtime_overrides("q", rate_limit="1"), V,
      "rate_limit"),
    C("overrides rate 1e-300", lambda c: c.set_runtime_overrides("q", rate_limit=1e-300), V,
      "rate_limit"),
    C("overrides rate 1e308", lambda c: c.set_runtime_overrides("q", rate_limit=1e308), V,
      "rate_limit"),
    C("overrides deadline -1", lambda c: c.set_runtime_overrides("q", deadline_ms=-1), V,
      "deadline_ms"),
    C("overrides deadline bool", lambda c: c.set_runtime_overrides("q", deadline_ms=True), V,
      "deadline_ms"),
    C("clear overrides queue", lambda c: c.clear_runtime_overrides(""), V, "queue"),
    C("read overrides queue", lambda c: c.queue_runtime_overrides(None), V, "queue"),
    C("runtime fresh 0", lambda c: c.list_runtime_instances(fresh_ms=0), V, "fresh_ms"),
    C("runtime fresh huge", lambda c: c.list_runtime_instances(fresh_ms=2**70), V, "fresh_ms"),
    # -- running -------------------------------------------------------------------------
    C("start no queues", lambda c: c.start([]), awa.NoQueuesConfigured, "queues"),
    C("start 0 workers", lambda c: c.start([("q", 0)]), awa.InvalidWorkers, "max_workers"),
    C("start duplicate", lambda c: c.start([("q", 1), ("q", 2)]), awa.DuplicateQueue, "q"),
    C("start weight", lambda c: c.start([{"name": "q", "weight": 0}]), awa.InvalidWeight,
      "weight"),
    C("start rate", lambda c: c.start([{"name": "q", "rate_limit": (0, 1)}]),
      awa.InvalidRateLimit, "rate_limit"),
    C("start rate 1e308", lambda c: c.start([{"name": "q", "rate_limit": (1e308, 0)}]),
      awa.InvalidRateLimit, "rate_limit"),
    C("start queue surrogate", lambda c: c.start([("q\ud800", 1)]), awa.InvalidSetting,
      "name"),
    C("start unknown setting", lambda c: c.start(["q"], bogus=1), awa.InvalidSetting, "start"),
    C("start staleness", lambda c: c.start(["q"], heartbeat_interval_ms=1000,
                                           heartbeat_staleness_ms=500),
      awa.InvalidSetting, "heartbeat_staleness_ms"),
    C("start global 0", lambda c: c.start(["q"], global_max_workers=0), awa.InvalidWorkers,
      "global_max_workers"),
    C("start min > global", lambda c: c.start([{"name": "q", "min_workers": 3}],
                                              global_max_workers=2),
      awa.MinWorkersExceedGlobal, "min_workers"),
    C("shutdown -1", lambda c: c.shutdown(timeout_ms=-1), V, "timeout_ms"),
    C("shutdown str", lambda c: c.shutdown(timeout_ms="1"), V, "timeout_ms"),
    C("snapshot without worker", lambda c: c.runtime_snapshot(), V, "runtime_snapshot"),
    C("task without kind", lambda c: c.task(None)(handler), V, "kind"),
    C("task empty kind", lambda c: c.task(None, kind="")(handler), V, "kind"),
    C("task empty queue", lambda c: c.task(None, kind="x", queue="")(handler), V, "queue"),
    C("task handler", lambda c: c.task(None, kind="x")(5), V, "handler"),
    C("on_event name", lambda c: c.on_event("bogus", handler), V, "event"),
    C("on_event callback", lambda c: c.on_event("completed", 5), V, "callback"),
    # -- periodic ------------------------------------------------------------------------
    C("cron name", lambda c: c.periodic("", "* * * * *", {}, kind="k"), V, "name"),
    C("cron name surrogate", lambda c: c.periodic("bad\ud800", "* * * * *", {}, kind="k"), V,
      "name"),
    C("cron kind surrogate", lambda c: c.periodic("n", "* * * * *", {}, kind="k\ud800"), V,
      "kind"),
    C("cron timezone surrogate", lambda c: c.periodic("n", "* * * * *", {}, kind="k",
                                                      timezone="UTC\ud800"), V, "timezone"),
    C("cron minute 61", lambda c: c.periodic("n", "61 * * * *", {}, kind="k"), V, "cron_expr"),
    C("cron 3 fields", lambda c: c.periodic("n", "* * *", {}, kind="k"), V, "cron_expr"),
    C("cron 7 fields", lambda c: c.periodic("n", "* * * * * * *", {}, kind="k"), V,
      "cron_expr"),
    C("cron step 0", lambda c: c.periodic("n", "*/0 * * * *", {}, kind="k"), V, "cron_expr"),
    C("cron never", lambda c: c.periodic("n", "0 0 31 2 *", {}, kind="k"), V, "cron_expr"),
    C("cron macro", lambda c: c.periodic("n", "@never", {}, kind="k"), V, "cron_expr"),
    C("cron garbage", lambda c: c.periodic("n", "every day", {}, kind="k"), V, "cron_expr"),
    C("cron int", lambda c: c.periodic("n", 5, {}, kind="k"), V, "cron_expr"),
    C("cron timezone", lambda c: c.periodic("n", "* * * * *", {}, kind="k",
                                            timezone="Mars/Olympus"), V, "timezone"),
    C("cron policy", lambda c: c.periodic("n", "* * * * *", {}, kind="k",
                                          missed_fire_policy="sometimes"), V,
      "missed_fire_policy"),
    C("cron args", lambda c: c.periodic("n", "* * * * *", {}), V, "kind"),
    C("cron priority", lambda c: c.periodic("n", "* * * * *", {}, kind="k", priority=0), V,
      "priority"),
    C("pause_cron empty", lambda c: c.pause_cron(""), V, "name"),
    C("pause_cron int", lambda c: c.pause_cron(5), V, "name"),
    C("pause_cron unknown", lambda c: c.pause_cron("nope"), awa.ScheduleNotFound, "nope"),
    C("resume_cron unknown", lambda c: c.resume_cron("nope"), awa.ScheduleNotFound, "nope"),
    C("trigger_cron unknown", lambda c: c.trigger_cron("nope"), awa.ScheduleNotFound, "nope"),
    C("remove_cron unknown", lambda c: c.remove_cron("nope"), awa.ScheduleNotFound, "nope"),
    # -- dead letter queue ---------------------------------------------------------------
    C("list_dlq limit", lambda c: c.list_dlq(limit=0), V, "limit"),
    C("list_dlq older -1", lambda c: c.list_dlq(older_than=-1), V, "older_than"),
    C("list_dlq older nan", lambda c: c.list_dlq(older_than=math.nan), V, "older_than"),
    C("list_dlq older huge", lambda c: c.list_dlq(older_than=1e300), V, "older_than"),
    C("list_dlq older str", lambda c: c.list_dlq(older_than="1d"), V, "older_than"),
    C("list_dlq kind", lambda c: c.list_dlq(kind=""), V, "kind"),
    C("retry_from_dlq no filter", lambda c: c.retry_from_dlq(), V, "filter"),
    C("retry_from_dlq ids str", lambda c: c.retry_from_dlq("12"), V, "ids"),
    C("retry_from_dlq ids 0", lambda c: c.retry_from_dlq([0]), V, "ids"),
    C("retry_from_dlq older", lambda c: c.retry_from_dlq(older_than=timedelta(days=-1)), V,
      "older_than"),
    C("purge_dlq no filter", lambda c: c.purge_dlq(), V, "filter"),
    C("purge_dlq ids", lambda c: c.purge_dlq([-1]), V, "ids"),
    C("purge_dlq id 0", lambda c: c.purge_dlq(0), V, "ids"),  # one id, as for move
    C("purge_dlq older -1", lambda c: c.purge_dlq(older_than=-1), V, "older_than"),
    # -- external callbacks --------------------------------------------------------------
    C("complete_external id", lambda c: c.complete_external("nope"), V, "callback_id"),
    C("complete_external int", lambda c: c.complete_external(5), V, "callback_id"),
    C("complete_external unknown", lambda c: c.complete_external(str(uuid.uuid4())),
      awa.CallbackNotFound, "callback"),
    C("complete_external payload", lambda c: c.complete_external(str(uuid.uuid4()),
                                                                 {"x": object()}), S, "payload"),
    C("complete_external payload 20 MB",
      lambda c: c.complete_external(str(uuid.uuid4()), {"x": "x" * 20_000_000}), V, "payload"),
    C("complete_external NUL", lambda c: c.complete_external(str(uuid.uuid4()), {"x": "\x00"}),
      V, "payload"),
    C("fail_external error", lambda c: c.fail_external(str(uuid.uuid4()), 5), V, "error"),
    C("fail_external id", lambda c: c.fail_external("nope", "x"), V, "callback_id"),
    C("retry_external unknown", lambda c: c.retry_external(str(uuid.uuid4())),
      awa.CallbackNotFound, "callback"),
    C("heartbeat_callback -1", lambda c: c.heartbeat_callback(str(uuid.uuid4()), -1), V,
      "timeout_seconds"),
    C("heartbeat_callback nan", lambda c: c.heartbeat_callback(str(uuid.uuid4()), math.nan), V,
      "timeout_seconds"),
]  # fmt: skip


def awa_snapshot(url: str) -> dict[str, list[str]]:
    """Every row of every table of the awa schema, as JSON text (order-independent)."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'awa' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        snapshot = {}
        for table in tables:
            query = sql.SQL("SELECT row_to_json(t)::text FROM awa.{} AS t").format(
                sql.Identifier(table)
            )
            snapshot[table] = sorted(row for (row,) in conn.execute(query).fetchall())
    return snapshot


def seed(url: str) -> None:
    """Something in every table, so that "unchanged" means something."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, finalized_at) VALUES "
            "('k', 'q', 'available', NULL), ('k', 'q', 'completed', now()), "
            "('k', 'q', 'failed', now()), ('k', 'q', 'cancelled', now()), "
            "('k', 'q', 'scheduled', NULL)"
        )
        conn.execute(
            "INSERT INTO awa.queue_meta (queue, paused, override_rate_limit) VALUES "
            "('q', true, 5), ('dead', false, NULL)"
        )
        conn.execute(
            "INSERT INTO awa.cron_schedules (name, cron_expr, kind, queue) "
            "VALUES ('nightly', '0 3 * * *', 'k', 'q')"
        )
        conn.execute(
            "INSERT INTO awa.dlq (id, kind, queue, state, reason) "
            "VALUES (100000, 'k', 'dead', 'failed', 'boom')"
        )


async def _call(client: Any, case: Case) -> None:
    result = case.call(client)
    if inspect.isawaitable(result):
        await result


def check(case: Case, exc: BaseException | None) -> str | None:
    """Why ``exc`` is not what ``case`` expects, or None."""
    if exc is None:
        return f"{case.id}: no error raised"
    if not isinstance(exc, case.error):
        return f"{case.id}: {type(exc).__name__}: {exc} (expected {case.error.__name__})"
    field = getattr(exc, "field", None)
    named = case.names in field if isinstance(field, str) else case.names in str(exc)
    return None if named else f"{case.id}: {exc!r} does not name {case.names!r}"


async def test_every_async_client_function_refuses_bad_input(database_url: str) -> None:
    seed(database_url)
    before = awa_snapshot(database_url)
    problems = []
    for case in CASES:
        async with awa.AsyncClient(database_url) as client:  # registrations start empty
            try:
                await _call(client, case)
            except Exception as exc:
                problems.append(check(case, exc))
            else:
                problems.append(check(case, None))
        if awa_snapshot(database_url) != before:
            problems.append(f"{case.id}: the database changed")
            before = awa_snapshot(database_url)
    assert [p for p in problems if p] == []


def test_every_sync_client_function_refuses_bad_input(database_url: str) -> None:
    seed(database_url)
    before = awa_snapshot(database_url)
    problems = []
    with awa.Client(database_url) as client:
        for case in CASES:
            if case.id.startswith(("task", "on_event", "cron")):
                continue  # registrations: the same objects as the async client's
            try:
                case.call(client)
            except Exception as exc:
                problems.append(check(case, exc))
            else:
                problems.append(check(case, None))
    assert [p for p in problems if p] == []
    assert awa_snapshot(database_url) == before


URL_CASES = [
    ("not a url", "database_url"),
    ("http://example.com/db", "database_url"),
    ("postgresql://[::1", "database_url"),
    ("postgresql://localhost/db?bogus_option=1", "database_url"),
    ("   ", "database_url"),
    # values libpq checks only when it connects: they failed at first use (a review)
    ("postgresql://localhost:notaport/db", "database_url"),
    ("postgresql://localhost:99999/db", "database_url"),
    ("postgresql://localhost/db?sslmode=bogus", "database_url"),
    ("postgresql://localhost/db?connect_timeout=abc", "database_url"),
    ("host=localhost target_session_attrs=leader", "database_url"),
]


@pytest.mark.parametrize(
    "url",
    ["postgresql://a:5432,b:5433/db", "host=a,b port=5432,", "postgresql:///db?host=/tmp",
     "postgresql://h/db?sslmode=verify-full&connect_timeout=10&keepalives=0",
     # as libpq and psycopg read them (a review found these refused)
     "postgresql://h/db?connect_timeout=2.5&keepalives_idle=+30", "host=h port=+5432"],
)  # fmt: skip
def test_valid_option_values_are_accepted(url: str) -> None:
    awa.AsyncClient(url)


@pytest.mark.parametrize(("url", "field"), URL_CASES)
def test_a_malformed_database_url_is_a_validation_error(url: str, field: str) -> None:
    for make in (awa.AsyncClient, awa.Client):
        with pytest.raises(awa.ValidationError) as caught:
            make(url)
        assert caught.value.field == field


def test_database_url_of_the_wrong_type() -> None:
    with pytest.raises(awa.ValidationError, match="database_url"):
        awa.AsyncClient(5)  # type: ignore[arg-type]
    with pytest.raises(awa.ValidationError, match="max_connections"):
        awa.AsyncClient("postgresql://localhost/db", max_connections=0)
    with pytest.raises(awa.ValidationError, match="max_connections: must be <= 10000"):
        awa.AsyncClient("postgresql://localhost/db", max_connections=10**14)  # a typo


async def test_an_unreachable_server_fails_at_once_with_the_reason() -> None:
    """No 30 s of silent pool retries, and the password never appears in the message."""
    client = awa.AsyncClient("postgresql://ada:s3cret-pw@127.0.0.1:1/app", max_connections=1)
    with pytest.raises(awa.DatabaseError) as caught:
        await client.queue_stats()
    message = str(caught.value)
    assert "cannot connect" in message and "Connection refused" in message
    assert "s3cret-pw" not in message and "\n" not in message
    await client.close()


async def test_args_up_to_the_limit_are_accepted(client: awa.AsyncClient) -> None:
    overhead = len('{"blob":""}')
    job = await client.insert({"blob": "x" * (MAX_ARGS_BYTES - overhead)}, kind="k")
    assert len((await client.get_job(job.id)).args["blob"]) == MAX_ARGS_BYTES - overhead
    with pytest.raises(awa.ValidationError, match="1 MiB") as caught:
        await client.insert({"blob": "x" * (MAX_ARGS_BYTES - overhead + 1)}, kind="k")
    assert caught.value.field == "args"


async def test_metadata_up_to_the_limit_is_accepted(client: awa.AsyncClient) -> None:
    overhead = len('{"blob":""}')
    fits = {"blob": "x" * (MAX_METADATA_BYTES - overhead)}
    job = await client.insert({}, kind="k", metadata=fits)
    assert (await client.get_job(job.id)).metadata == fits
    with pytest.raises(awa.ValidationError, match="64 KiB") as caught:
        await client.insert({}, kind="k", metadata={"blob": "x" * (MAX_METADATA_BYTES - 10)})
    assert caught.value.field == "metadata"


async def test_storable_look_alikes_round_trip(client: awa.AsyncClient) -> None:
    """What only looks like an unstorable escape is stored verbatim."""
    args = {"backslash_u0000": "\\u0000", "pair": "\U0001f600", "escaped_pair": "\\ud83d"}
    job = await client.insert(args, kind="k", metadata={"m": "\\u0000"})
    stored = await client.get_job(job.id)
    assert stored.args == args and stored.metadata == {"m": "\\u0000"}


async def test_a_failed_insert_in_a_transaction_rolls_back_the_application_writes(
    client: awa.AsyncClient, database_url: str
) -> None:
    async with client.transaction() as tx:
        await tx.execute("CREATE TABLE IF NOT EXISTS public.orders (id int)")
    before = awa_snapshot(database_url)
    with pytest.raises(awa.ValidationError, match="args"):
        async with client.transaction() as tx:
            await tx.execute("INSERT INTO public.orders (id) VALUES (%s)", (42,))
            await tx.insert({"x": "\x00"}, kind="k")
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM public.orders").fetchone() == (0,)
    assert awa_snapshot(database_url) == before


async def test_handler_outcomes_out_of_range_are_refused() -> None:
    for make, value in ((awa.RetryAfter, -1), (awa.Snooze, math.inf), (awa.RetryAfter, 1e300),
                        (awa.Snooze, "5"), (awa.RetryAfter, True)):  # fmt: skip
        with pytest.raises(awa.ValidationError, match="seconds"):
            make(value)


async def test_a_worker_ignores_malformed_control_notices(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Any role that can connect may NOTIFY on awa_control and awa_available: the listener
    drops what it cannot use — a cancel that does not name the attempt's lease included —
    and keeps serving the well-formed notices, in order."""

    release = asyncio.Event()

    @client.task(None, kind="k", queue="q")
    async def run(job: awa.Job[Any]) -> None:
        await release.wait()

    await client.start([("q", 2)], **FAST_WORKER)
    worker = client._worker
    try:
        kept, cancelled = await client.insert_many([{}, {}], kind="k", queue="q")

        async def both_running() -> bool:
            return {kept.id, cancelled.id} <= set(worker.executor.attempts)

        await wait_for(both_running)
        garbage = ["{not json", "[1, 2]", "null", '{"cancel": "x"}', '{"cancel": 1e999}',
                   '{"queue_meta": 5}', "x" * 7_000,
                   f'{{"cancel": {kept.id}}}',  # no lease: a forgery
                   f'{{"cancel": {kept.id}, "run_lease": "1"}}',
                   f'{{"cancel": {kept.id}, "run_lease": 99}}']  # fmt: skip
        for payload in garbage:
            db.execute("SELECT pg_notify('awa_control', %s)", (payload,))
        for payload in ["", "no-such-queue", "q" * 500]:
            db.execute("SELECT pg_notify('awa_available', %s)", (payload,))
        await client.cancel(cancelled.id)  # a real notice, sent after the garbage

        async def cancel_applied() -> bool:
            return cancelled.id not in worker.executor.attempts

        await wait_for(cancel_applied)
        assert worker.executor.attempts[kept.id].cancel_reason is None
        release.set()

        async def done() -> bool:
            return (await client.get_job(kept.id)).state is awa.JobState.COMPLETED

        await wait_for(done)
        assert worker.listener.alive and worker.listener.connections == 1
    finally:
        release.set()
        await client.shutdown()


async def test_a_job_stored_nested_deeper_than_the_readers_stack_is_still_listed(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Args 960 levels deep (stored before awa refused more than 256, or by SQL) failed
    every list_jobs of their queue, and the dashboard's, with a RecursionError."""
    job = await client.insert({}, kind="k", queue="deep")
    db.execute(
        "UPDATE awa.jobs SET args = jsonb_build_object('x', %s::jsonb) WHERE id = %s",
        ("[" * 960 + "]" * 960, job.id),
    )
    [listed] = await client.list_jobs(queue="deep")
    assert listed.id == job.id and isinstance(listed.args["x"], list)


async def test_a_job_nested_past_what_python_reads_fails_alone_and_is_still_listed(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Nested 1 500 levels by SQL: past what even a fresh stack decodes. It failed every
    read of its queue, and each claim batch it was in — its neighbours left running with
    no handler until rescued, then claimed beside it again (a review)."""
    ran: list[int] = []
    client.task(None, kind="k", queue="deep")(lambda job: ran.append(job.id))
    jobs = await client.insert_many([{}] * 4, kind="k", queue="deep")
    db.execute(
        "UPDATE awa.jobs SET args = %s::jsonb WHERE id = %s",
        ("[" * 1500 + "]" * 1500, jobs[1].id),
    )
    listed = {j.id: j for j in await client.list_jobs(queue="deep")}
    assert (
        "nested deeper than Python's JSON decoder reads"
        in (listed[jobs[1].id].args["awa_undecodable"])
    )
    await client.start([("deep", 4)], **FAST_WORKER)
    try:
        failed = await wait_until_state(client, jobs[1].id, awa.JobState.FAILED)
    finally:
        await client.shutdown()
    assert sorted(ran) == sorted(j.id for j in jobs if j.id != jobs[1].id)
    assert failed.attempt == 1 and failed.errors[-1]["type"] == "SerializationError"
    assert "cannot decode args" in failed.errors[-1]["error"]


async def wait_until_state(
    client: awa.AsyncClient, job_id: int, state: awa.JobState
) -> awa.StoredJob:
    async def reached() -> awa.StoredJob | None:
        job = await client.get_job(job_id)
        return job if job.state is state else None

    found: awa.StoredJob = await wait_for(reached)
    return found


async def test_an_unreadable_runtime_snapshot_does_not_break_listing_the_fleet(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at, "
        "last_seen_at, snapshot) VALUES (%s, 'h', 1, now(), now(), %s)",
        (str(uuid.uuid4()), '{"from": "another version of awa", "queues": 5}'),
    )
    [instance] = await client.list_runtime_instances()
    assert instance.hostname == "h" and instance.snapshot is None


def test_misused_clients_raise_awa_errors(database_url: str) -> None:
    """Calls that cannot work raise typed awa errors, never bare RuntimeErrors."""
    client = awa.Client(database_url)
    seen: list[BaseException] = []

    def hook(event: awa.JobEvent) -> None:  # runs on the client's own loop
        for call in (client.queue_stats, client.close):  # close() waited for itself: forever
            try:
                call()
            except awa.AwaError as exc:
                seen.append(exc)

    client.on_event("completed", hook)

    @client.task(None, kind="k")
    def handler(job: awa.Job[Any]) -> None:
        return None

    client.insert({}, kind="k")
    client.start(["default"])
    try:
        wait_until(lambda: len(seen) >= 2, timeout=30)
        assert client.queue_stats()  # the refused close() did not close it
    finally:
        client.shutdown()
    assert [type(exc) for exc in seen[:2]] == [awa.BlockingCallOnLoop] * 2
    client.close()
    with pytest.raises(awa.ClientClosed):
        client.queue_stats()
