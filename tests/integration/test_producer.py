"""Producing jobs on a real PostgreSQL: insert, insert_many, transactions, unique jobs."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from psycopg.pq import TransactionStatus

import awa
import awa.testing
from awa.client import insert as insert_path
from awa.client.insert import _COPY_CHUNK
from awa.db import sql
from tests.helpers import FAST_WORKER, noop_task, statements_running, wait_for


@dataclasses.dataclass
class SendEmail:
    to: str
    subject: str = "hi"


def count_jobs(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM awa.jobs").fetchone()
    assert row is not None
    return int(row[0])


async def test_insert_returns_the_stored_job(client: awa.AsyncClient) -> None:
    job = await client.insert(SendEmail("a@example.com"), tags=["t"], metadata={"m": 1})
    assert job.id > 0
    assert job.kind == "send_email" and job.queue == "default"
    assert job.args == {"to": "a@example.com", "subject": "hi"}
    assert job.state is awa.JobState.AVAILABLE
    assert (job.priority, job.attempt, job.max_attempts, job.run_lease) == (2, 0, 25, 0)
    assert job.tags == ["t"] and job.metadata == {"m": 1} and job.errors == []
    assert job.created_at.tzinfo is not None and job.attempted_at is None
    fetched = await client.get_job(job.id)
    assert fetched == job


async def test_future_run_at_is_scheduled(client: awa.AsyncClient) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    job = await client.insert(SendEmail("x"), run_at=later)
    assert job.state is awa.JobState.SCHEDULED
    assert abs((job.run_at - later).total_seconds()) < 0.001


@pytest.mark.parametrize(
    "offset",
    [timedelta(seconds=1, microseconds=5), timedelta(hours=23, minutes=59, seconds=59)],
    ids=["fractional", "past-16-hours"],
)
async def test_a_run_at_whose_offset_postgresql_cannot_read_is_stored(
    client: awa.AsyncClient, offset: timedelta
) -> None:
    """PostgreSQL reads no fractional UTC offset (an LMT zone's +00:00:01.000005) nor one
    past ±15:59:59 (Python's go to a day): both were a DatabaseError from both insert
    paths. Every instant is sent in UTC."""
    later = datetime.now(UTC) + timedelta(hours=1)
    odd = later.astimezone(timezone(offset))
    job = await client.insert(SendEmail("x"), run_at=odd)
    [copied] = await client.insert_many([SendEmail("y")], run_at=odd)
    for stored in (await client.get_job(job.id), await client.get_job(copied.id)):
        assert abs((stored.run_at - later).total_seconds()) < 0.001


async def test_dict_args_and_pydantic_style_models(client: awa.AsyncClient) -> None:
    class Model:  # duck-typed like a pydantic model
        def model_dump(self, mode: str = "python") -> dict[str, Any]:
            return {"x": 1}

    job = await client.insert({"a": [1, 2]}, kind="raw")
    assert job.kind == "raw" and job.args == {"a": [1, 2]}
    model_job = await client.insert(Model())
    assert model_job.kind == "model" and model_job.args == {"x": 1}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"priority": 9}, awa.ValidationError),
        ({"max_attempts": 0}, awa.ValidationError),
        ({"tags": ["t"] * 21}, awa.ValidationError),
        ({"queue": "q" * 201}, awa.ValidationError),
        ({"kind": "k" * 201}, awa.ValidationError),
        ({"run_at": datetime(2030, 1, 1)}, awa.ValidationError),
        ({"metadata": {"bad": object()}}, awa.SerializationError),
    ],
)
async def test_bad_values_are_rejected_and_nothing_is_written(
    client: awa.AsyncClient,
    db: psycopg.Connection[Any],
    options: dict[str, Any],
    error: type[Exception],
) -> None:
    with pytest.raises(error):
        await client.insert(SendEmail("x"), **options)
    with pytest.raises(error):
        await client.insert_many([SendEmail("ok"), SendEmail("x")], **options)
    assert count_jobs(db) == 0


async def test_unserialisable_args_write_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    with pytest.raises(awa.SerializationError):
        await client.insert({"x": {1, 2}}, kind="k")
    with pytest.raises(awa.SerializationError):
        await client.insert_many([{"ok": 1}, {"x": object()}], kind="k")
    assert count_jobs(db) == 0


async def test_insert_many_uses_copy_and_returns_every_job(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    later = datetime.now(UTC) + timedelta(minutes=5)
    jobs = await client.insert_many([SendEmail(f"{i}@x") for i in range(500)], queue="bulk")
    scheduled = await client.insert_many([SendEmail("s")], run_at=later, priority=1)
    assert len(jobs) == 500 and len({j.id for j in jobs}) == 500
    assert [j.args["to"] for j in jobs[:3]] == ["0@x", "1@x", "2@x"]
    for job in jobs[:5]:
        assert await client.get_job(job.id) == job
    assert scheduled[0].state is awa.JobState.SCHEDULED
    row = db.execute(
        "SELECT count(*) FILTER (WHERE queue = 'bulk' AND state = 'available'), count(*) "
        "FROM awa.jobs"
    ).fetchone()
    assert row == (500, 501)
    assert await client.insert_many([]) == []


async def test_insert_many_across_several_copy_chunks_keeps_every_row_in_order(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """More rows than two COPY chunks, the last one partial: every row lands once, in
    the order given, each under the id it was returned with."""
    n = 2 * _COPY_CHUNK + 7
    jobs = await client.insert_many([{"i": i} for i in range(n)], kind="k", queue="chunks")
    assert [job.args["i"] for job in jobs] == list(range(n))
    stored = db.execute(
        "SELECT id, (args->>'i')::int FROM awa.jobs WHERE queue = 'chunks' ORDER BY id"
    ).fetchall()
    assert stored == [(job.id, job.args["i"]) for job in jobs]


async def test_transaction_commits_jobs_with_application_rows(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    async with client.transaction() as tx:
        assert await tx.execute("INSERT INTO orders VALUES (%s)", (1,)) == 1
        job = await tx.insert(SendEmail("a"))
        await tx.insert_many([SendEmail("b"), SendEmail("c")])
        assert (await tx.fetch_one("SELECT count(*) AS n FROM awa.jobs"))["n"] == 3
    assert (await client.get_job(job.id)).args["to"] == "a"
    assert count_jobs(db) == 3


async def test_transaction_rollback_drops_jobs(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    with pytest.raises(RuntimeError, match="boom"):
        async with client.transaction() as tx:
            await tx.execute("INSERT INTO orders VALUES (1)")
            await tx.insert(SendEmail("a"))
            raise RuntimeError("boom")
    assert count_jobs(db) == 0
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)


async def test_a_caught_unique_conflict_leaves_the_transaction_usable(
    client: awa.AsyncClient, sync_client: awa.Client, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    dup = await client.insert(SendEmail("dup"), unique_opts={})
    async with client.transaction() as tx:
        await tx.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(awa.UniqueConflict) as refused:  # idempotent enqueue: already there
            await tx.insert(SendEmail("dup"), unique_opts={})
        assert refused.value.existing_id == dup.id  # looked up in the savepoint's wake
        with pytest.raises(awa.UniqueConflict) as refused:
            await tx.insert_many([SendEmail("new"), SendEmail("dup")], unique_opts={})
        assert refused.value.existing_id == dup.id
        await tx.insert(SendEmail("after"))
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (1,)
    assert count_jobs(db) == 2  # "dup" and "after"; "new" went with its batch
    with sync_client.transaction() as stx:  # the blocking twin shares it
        stx.execute("INSERT INTO orders VALUES (2)")
        with pytest.raises(awa.UniqueConflict) as refused:
            stx.insert(SendEmail("dup"), unique_opts={})
        assert refused.value.existing_id == dup.id
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (2,)


async def test_a_failed_statement_caught_in_the_block_is_not_a_silent_rollback(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    with pytest.raises(awa.DatabaseError, match="rolled back"):
        async with client.transaction() as tx:
            await tx.insert(SendEmail("lost"))
            with pytest.raises(psycopg.errors.UndefinedTable):
                await tx.execute("INSERT INTO no_such_table VALUES (1)")
    assert count_jobs(db) == 0


async def test_unique_jobs_conflict_while_guarded(client: awa.AsyncClient) -> None:
    opts = {"by_args": True}
    first = await client.insert(SendEmail("u"), unique_opts=opts)
    with pytest.raises(awa.UniqueConflict) as refused:
        await client.insert(SendEmail("u"), unique_opts=opts)
    # The job that holds the key is named, so it can be explained (a review: it was not).
    assert refused.value.existing_id == first.id
    assert f"job {first.id} already holds this unique key" in str(refused.value)
    assert (await client.explain(first.id)).job.id == first.id
    other = await client.insert(SendEmail("v"), unique_opts=opts)
    assert other.id != first.id
    cancelled = await client.cancel(first.id)
    assert cancelled.state is awa.JobState.CANCELLED
    again = await client.insert(SendEmail("u"), unique_opts=opts)  # cancelled is not guarded
    assert again.id != first.id


def test_a_single_unique_inserts_conflict_is_no_server_error(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """The unique index's error made the server log an ERROR, and by default the statement,
    for every routine conflict (a soak: 40 000 lines for 1 000 conflicts); the statement
    now skips the duplicate, returning no row, and the client raises UniqueConflict."""
    spec = insert_path.build_spec(SendEmail("once"), kind="send_email", queue="q",
                                  unique_opts={})  # fmt: skip
    with psycopg.connect(database_url) as conn:  # one transaction: an error would abort it
        first = conn.execute(sql.JOB_INSERT_UNIQUE, spec.params()).fetchone()
        assert first is not None
        assert conn.execute(sql.JOB_INSERT_UNIQUE, spec.params()).fetchone() is None
        assert conn.info.transaction_status is TransactionStatus.INTRANS  # not INERROR
    assert count_jobs(db) == 1
    assert "DO NOTHING" not in sql.JOB_INSERT + sql.JOB_INSERT_UNSEATED  # costs every insert


async def test_a_unique_insert_above_read_committed_is_still_a_unique_conflict(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """``ON CONFLICT`` above READ COMMITTED fails on a key held by a row its snapshot
    cannot see (a serialization failure), where the index's error was the UniqueConflict
    callers catch (a review): in a caller's transaction the insert keeps the plain
    statement, and a skipping one at a stricter default isolation maps the failure."""
    held = await client.insert(SendEmail("rr"), unique_opts={})
    async with client.transaction() as tx:  # its snapshot predates the holder below
        await tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        await tx.execute("SELECT 1")
        await client.insert(SendEmail("later"), unique_opts={})
        with pytest.raises(awa.UniqueConflict):  # (its holder out of the snapshot's sight)
            await tx.insert(SendEmail("later"), unique_opts={})
    strict = conninfo.make_conninfo(
        database_url, options="-c default_transaction_isolation=repeatable\\ read"
    )
    async with awa.AsyncClient(strict) as other:  # autocommit inserts, repeatable read
        with pytest.raises(awa.UniqueConflict) as refused:
            await other.insert(SendEmail("rr"), unique_opts={})
        assert refused.value.existing_id == held.id
        spec = insert_path.build_spec(SendEmail("race"), kind="send_email", queue="default",
                                      unique_opts={})  # fmt: skip
        with psycopg.connect(database_url) as holder:  # the key taken, not yet committed
            holder.execute(sql.JOB_INSERT_UNIQUE, spec.params())
            waiting = asyncio.ensure_future(
                other.insert(SendEmail("race"), unique_opts={})
            )  # waits for the holder's transaction, then its snapshot cannot see the row
            await wait_for(lambda: statements_running(db, "-- job_insert", on_a_lock=True))
        with pytest.raises(awa.UniqueConflict):
            await waiting


async def test_an_insert_at_a_stricter_isolation_is_run_again_not_called_a_conflict(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Above READ COMMITTED, an insert whose handoff seat changed after its snapshot fails
    to serialize; taken for a unique conflict, a new key's job was never written (a
    review: 60 of 240 lost). Run alone, it is run again and inserts."""
    noop_task(client, queue="q", kind="k")
    await client.start([("q", 2)], **FAST_WORKER)
    try:
        await wait_for(lambda: _free_seats(db))
        strict = conninfo.make_conninfo(
            database_url, options="-c default_transaction_isolation=repeatable\\ read"
        )
        async with awa.AsyncClient(strict) as producer:
            with psycopg.connect(database_url) as holder:  # the key, held then given up
                later = datetime.now(UTC) + timedelta(hours=1)  # scheduled: it takes no seat
                spec = insert_path.build_spec({"n": 1}, kind="k", queue="q", unique_opts={},
                                              run_at=later)  # fmt: skip
                holder.execute(sql.JOB_INSERT_UNIQUE, spec.params())
                waiting = asyncio.ensure_future(
                    producer.insert({"n": 1}, kind="k", queue="q", unique_opts={})
                )
                await wait_for(lambda: statements_running(db, "-- job_insert", on_a_lock=True))
                db.execute("UPDATE awa.handoff_seats SET expires_at = expires_at WHERE queue = 'q'")
                holder.rollback()
            job = await waiting
        assert (await client.get_job(job.id)).args == {"n": 1}
    finally:
        await client.shutdown()


async def _free_seats(db: psycopg.Connection[Any]) -> bool:
    row = db.execute(
        "SELECT count(*) FROM awa.handoff_seats WHERE queue = 'q' AND job_id IS NULL"
    ).fetchone()
    return bool(row and row[0])


async def test_unique_conflict_inside_insert_many_writes_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    dup = await client.insert(SendEmail("dup"), unique_opts={})
    with pytest.raises(awa.UniqueConflict) as refused:
        await client.insert_many([SendEmail("new"), SendEmail("dup")], unique_opts={})
    assert refused.value.existing_id == dup.id
    assert count_jobs(db) == 1


async def test_unique_by_period_and_custom_states(client: awa.AsyncClient) -> None:
    # Guarded while the job lives, not once it completed or was cancelled.
    states = ["scheduled", "available", "running", "retryable", "waiting_external"]
    opts = {"by_args": False, "by_period": 3600, "states": states}
    await client.insert(SendEmail("a"), unique_opts=opts)
    with pytest.raises(awa.UniqueConflict):
        await client.insert(SendEmail("b"), unique_opts=opts)
    cancelled = await client.cancel_by_unique_key(SendEmail("zzz"), unique_opts=opts)
    assert cancelled is not None and cancelled.state is awa.JobState.CANCELLED
    await client.insert(SendEmail("c"), unique_opts=opts)
    assert await client.cancel_by_unique_key(SendEmail("x"), kind="nope", unique_opts=opts) is None


async def test_a_key_is_guarded_in_every_state_a_job_reaches_on_its_own(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    # A duplicate let in while the first job sat in an unguarded state collided when that
    # job moved on (a promotion, a completion, a callback's answer), and that statement
    # failed for every job it wrote. Such state lists are refused...
    with pytest.raises(awa.ValidationError, match=r"unique_opts\.states.*missing running"):
        await client.insert(SendEmail("a"), unique_opts={"states": ["scheduled", "available"]})
    # ...and the default guards a job waiting for its callback too.
    first = await client.insert(SendEmail("a"), unique_opts={})
    db.execute("UPDATE awa.jobs SET state = 'waiting_external' WHERE id = %s", (first.id,))
    with pytest.raises(awa.UniqueConflict):
        await client.insert(SendEmail("a"), unique_opts={})


async def test_registered_task_queue_is_the_insert_default(client: awa.AsyncClient) -> None:
    @client.task(SendEmail, queue="email")
    async def send(job: awa.Job[SendEmail]) -> None:
        return None

    assert (await client.insert(SendEmail("a"))).queue == "email"
    assert (await client.insert(SendEmail("a"), queue="other")).queue == "other"
    assert (await client.insert({"x": 1}, kind="k")).queue == "default"

    @client.task(None, kind="charge", queue="pay")
    async def charge(job: awa.Job[Any]) -> None:
        return None

    # Dict args name their task by kind: its queue is theirs too, however they are inserted.
    assert (await client.insert({"x": 1}, kind="charge")).queue == "pay"
    many = await client.insert_many([{"x": 2}, awa.InsertItem({"x": 3})], kind="charge")
    assert [job.queue for job in many] == ["pay", "pay"]
    async with client.transaction() as tx:
        assert (await tx.insert({"x": 4}, kind="charge")).queue == "pay"
    unique = await client.insert({"x": 5}, kind="charge", unique_opts={"by_queue": True})
    cancelled = await client.cancel_by_unique_key(
        {"x": 5}, kind="charge", unique_opts={"by_queue": True}
    )
    assert cancelled is not None and cancelled.id == unique.id


async def test_insert_many_round_trips_awkward_values(client: awa.AsyncClient) -> None:
    """COPY rows are formatted by awa: every escape-worthy character must survive."""
    nasty = 'tab\there, newline\nthere, back\\slash, "quote", comma, {brace}, é, \\N, \r'
    later = datetime.now(UTC) + timedelta(days=1)
    jobs = await client.insert_many(
        [{"text": nasty, "list": [nasty, 1.5, None], "nested": {"k\\": "\t"}}],
        kind=f"kind {nasty}"[:200],
        queue=f"queue\t{nasty}"[:200],
        tags=[nasty[:200], "plain", "x,y", '"q"'],
        metadata={"m": nasty, "\\": "\n"},
        run_at=later,
        unique_opts={"by_queue": True},
        priority=1,
        max_attempts=7,
    )
    stored = await client.get_job(jobs[0].id)
    assert stored == jobs[0]
    assert stored.args["text"] == nasty and stored.metadata == {"m": nasty, "\\": "\n"}
    assert stored.tags == [nasty[:200], "plain", "x,y", '"q"']
    assert stored.state is awa.JobState.SCHEDULED and stored.run_at == later
    with pytest.raises(awa.UniqueConflict):
        await client.insert_many(
            [{"text": nasty, "list": [nasty, 1.5, None], "nested": {"k\\": "\t"}}],
            kind=f"kind {nasty}"[:200],
            queue=f"queue\t{nasty}"[:200],
            unique_opts={"by_queue": True},
        )


@dataclasses.dataclass
class Resize:
    width: int


async def test_insert_many_mixes_kinds_queues_and_unique_keys_row_by_row(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Rows of one call share formatted stretches (kind and queue per args type, options
    per call): every stored row must still carry its own kind, queue, args and key."""

    @client.task(Resize, queue="images")
    async def resize(job: awa.Job[Resize]) -> None:
        return None

    mixed: list[Any] = [SendEmail("a"), Resize(10), SendEmail("b\tc"), Resize(20)]
    jobs = await client.insert_many(mixed, tags=["x"], metadata={"m": "v"})
    unique = await client.insert_many(
        [{"n": 1}, {"n": 2}], kind="u", unique_opts={"by_args": True}, max_attempts=3
    )
    rows = db.execute(
        "SELECT id, kind, queue, args, tags, metadata, max_attempts, unique_key IS NOT NULL "
        "FROM awa.jobs ORDER BY id"
    ).fetchall()
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("send_email", "default", {"to": "a", "subject": "hi"}),
        ("resize", "images", {"width": 10}),
        ("send_email", "default", {"to": "b\tc", "subject": "hi"}),
        ("resize", "images", {"width": 20}),
        ("u", "default", {"n": 1}),
        ("u", "default", {"n": 2}),
    ]
    assert [r[0] for r in rows] == [j.id for j in [*jobs, *unique]]
    assert all(r[4] == ["x"] and r[5] == {"m": "v"} for r in rows[:4])
    assert [(r[6], r[7]) for r in rows[4:]] == [(3, True), (3, True)]
    keys = db.execute("SELECT count(DISTINCT unique_key) FROM awa.jobs WHERE kind = 'u'")
    assert keys.fetchone() == (2,)


async def test_a_task_registered_under_its_own_kind_gets_the_jobs_of_its_args_type(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """``@client.task(SendMail, kind="mail custom")``: every insert path names that kind
    for a SendMail, not the one derived from the class (no handler has that one)."""

    @dataclasses.dataclass
    class SendMail:
        to: str

    @client.task(SendMail, kind="mail custom", queue="mailq")
    async def send(job: awa.Job[SendMail]) -> None:
        return None

    one = await client.insert(SendMail("a"))
    many = await client.insert_many([SendMail("b"), awa.InsertItem(SendMail("c"))])
    async with client.transaction() as tx:
        in_tx = await tx.insert(SendMail("d"))
    assert {(j.kind, j.queue) for j in [one, *many, in_tx]} == {("mail custom", "mailq")}
    rows = db.execute("SELECT DISTINCT kind, queue FROM awa.jobs").fetchall()
    assert rows == [("mail custom", "mailq")]
    done = await awa.testing.work_one(client, SendMail)
    assert done.outcome == "completed"
    seen: list[str] = []
    client.on_event("completed", lambda e: seen.append(e.job.kind), job_kind=SendMail)
    assert client._hooks is not None and client._hooks._subscriptions[-1].job_kind == (
        "mail custom"
    )  # the hook follows the registered kind, as the inserts do


async def test_a_conflict_without_a_holder_to_name_keeps_its_cause(
    client: awa.AsyncClient,
) -> None:
    """Two of one batch share a key: no committed holder to name. The conflict was
    raised as its own cause, so a walk down __cause__ never ended (a review). (The
    client refuses such a batch before writing it: the COPY is given one here.)"""
    twice = insert_path.build_specs(
        [SendEmail("twice")] * 2, default_queue=lambda *_: "default", unique_opts={}
    )
    with pytest.raises(awa.UniqueConflict) as refused:
        async with (await client._get_pool()).connection() as conn:
            await insert_path.insert_many(conn, twice)
    assert refused.value.existing_id is None
    assert isinstance(refused.value.__cause__, psycopg.errors.UniqueViolation)


async def test_calls_gathered_in_one_transaction_run_one_after_another(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A unique insert is a savepoint, the insert and a rollback to the savepoint: a
    gathered insert that ran between them was undone with the conflict, though it had
    returned its Job and the block committed (a review)."""
    await client.insert(SendEmail("dup"), unique_opts={})

    async def idempotent(tx: awa.Transaction) -> None:
        with pytest.raises(awa.UniqueConflict):
            await tx.insert(SendEmail("dup"), unique_opts={})

    kept = []
    for n in range(3):
        async with client.transaction() as tx:
            _, job, jobs = await asyncio.gather(
                idempotent(tx),
                tx.insert(SendEmail(f"one {n}")),
                tx.insert_many([SendEmail(f"many {n}")]),
            )
        kept += [job.id, jobs[0].id]
    stored = db.execute("SELECT id FROM awa.jobs WHERE id = ANY(%s)", (kept,)).fetchall()
    assert sorted(row[0] for row in stored) == sorted(kept)


async def test_a_transaction_used_after_its_block_refuses_every_call(
    client: awa.AsyncClient, sync_client: awa.Client, db: psycopg.Connection[Any]
) -> None:
    """Its connection went back to the pool: a later insert ran in whatever transaction
    was lent that connection next, and went with that one's rollback (a review)."""
    async with client.transaction() as stale:
        pass
    with sync_client.transaction() as sync_stale:
        pass
    async with client.transaction() as other:  # may well be lent the same connection
        for call in (
            stale.insert(SendEmail("late")),
            stale.insert_many([SendEmail("late")]),
            stale.execute("SELECT 1"),
            stale.fetch_all("SELECT 1"),
        ):
            with pytest.raises(awa.TransactionEnded):
                await call
        with pytest.raises(awa.TransactionEnded):
            stale.connection  # noqa: B018 (the property refuses)
        await other.insert(SendEmail("kept"))
    with pytest.raises(awa.TransactionEnded):
        sync_stale.insert(SendEmail("late"))
    with pytest.raises(awa.TransactionEnded):
        sync_stale.connection  # noqa: B018
    assert db.execute("SELECT args->>'to' FROM awa.jobs").fetchall() == [("kept",)]


async def test_a_block_left_while_a_call_is_cut_short_rolls_back_after_it_unwinds(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Ctrl-C in a blocking client's transaction cancels the call in flight and rolls
    back at once: the rollback ran while the cancelled insert_many was still unwinding
    its savepoint, and the block raised psycopg's OutOfOrderTransactionNesting instead of
    the interrupt (a review). The same from async code: cancel a call, leave the block."""
    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE awa.jobs IN SHARE MODE")  # the COPY waits for it
        try:
            with pytest.raises(RuntimeError, match="left"):
                async with client.transaction() as tx:
                    call = asyncio.create_task(
                        tx.insert_many([SendEmail("a"), SendEmail("b")], unique_opts={})
                    )
                    await wait_for(lambda: statements_running(db, "-- job_copy_in", on_a_lock=True))
                    call.cancel()
                    locker.rollback()
                    raise RuntimeError("left")
        finally:
            locker.rollback()  # (a failed wait would leave the call blocked behind it)
    with pytest.raises(asyncio.CancelledError):
        await call
    assert count_jobs(db) == 0
    assert (await client.insert(SendEmail("after"))).id > 0


async def test_a_block_cancelled_while_it_waits_for_a_call_still_ends_the_transaction(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """The block's exit waits for the call in flight; cancelled during that wait (a
    timeout around the block), it never marked the transaction ended, and a later call
    ran on the pooled connection (a review of the ending)."""
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    ended: list[awa.Transaction] = []
    calls: list[asyncio.Task[int]] = []

    async def block() -> None:
        async with client.transaction() as tx:
            ended.append(tx)
            calls.append(asyncio.create_task(tx.execute("LOCK TABLE orders")))  # waits
            await wait_for(lambda: statements_running(db, "LOCK TABLE orders", on_a_lock=True))
            left.set()  # the exit then runs to its wait for the call in this same step
            raise RuntimeError("left")

    left = asyncio.Event()
    with psycopg.connect(database_url) as locker:
        locker.execute("LOCK TABLE orders")
        try:
            task = asyncio.create_task(block())
            await left.wait()
            task.cancel()  # delivered at the wait, before the call in flight can end
        finally:
            locker.rollback()  # (the rollback of the block waits for that call)
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(awa.TransactionEnded):
        await ended[0].insert(SendEmail("late"))
    assert count_jobs(db) == 0
