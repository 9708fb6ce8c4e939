"""awa.testing: work_one, drain_queue, inline mode and assert_enqueued."""

from __future__ import annotations

import asyncio
import dataclasses
from decimal import Decimal
from typing import Any
from uuid import UUID

import pydantic
import pytest

import awa
import awa.testing


@dataclasses.dataclass
class SendEmail:
    to: str


class Charge(pydantic.BaseModel):
    amount: Decimal
    uid: UUID


async def test_work_one_and_drain_queue_use_the_real_path(client: awa.AsyncClient) -> None:
    sent: list[str] = []
    events: list[str] = []
    client.on_event("*", lambda e: events.append(e.name))

    @client.task(SendEmail, queue="email")
    async def send(job: awa.Job[SendEmail]) -> None:
        sent.append(job.args.to)
        job.set_progress(100, "sent")
        if job.args.to == "bad@example.com":
            raise ValueError("bounced")

    assert await awa.testing.work_one(client, queue="email") is None  # empty
    for to in ("a@example.com", "bad@example.com", "c@example.com"):
        await client.insert(SendEmail(to))
    first = await awa.testing.work_one(client, queue="email")
    assert first is not None and first.state is awa.JobState.COMPLETED and first.attempt == 1
    rest = await awa.testing.drain_queue(client, "email")
    assert [j.state for j in rest] == [awa.JobState.RETRYABLE, awa.JobState.COMPLETED]
    assert rest[0].errors[-1]["error"] == "bounced"
    assert rest[0].progress == {"percent": 100.0, "message": "sent"}  # kept for the retry
    assert sent == ["a@example.com", "bad@example.com", "c@example.com"]
    assert events.count("completed") == 2 and events.count("retried") == 1
    assert await awa.testing.drain_queue(client, "email") == []


async def test_inline_mode_runs_jobs_as_they_are_inserted(client: awa.AsyncClient) -> None:
    ran: list[int] = []

    @client.task(None, kind="k", queue="q")
    def handler(job: awa.Job[Any]) -> None:  # sync handlers run inline too
        ran.append(job.args["n"])

    earlier = await client.insert({"n": 0}, kind="k", queue="q")
    async with awa.testing.inline(client):
        job = await client.insert({"n": 1}, kind="k", queue="q")
        many = await client.insert_many([{"n": 2}, {"n": 3}], kind="k", queue="q")
    assert job.state is awa.JobState.COMPLETED
    assert [j.state for j in many] == [awa.JobState.COMPLETED] * 2
    assert ran == [1, 2, 3]  # only the jobs inserted inside the block, in order
    assert (await client.get_job(earlier.id)).state is awa.JobState.AVAILABLE
    after = await client.insert({"n": 4}, kind="k", queue="q")
    assert after.state is awa.JobState.AVAILABLE  # inline mode ended with the block


async def test_assert_enqueued(client: awa.AsyncClient) -> None:
    await client.insert(SendEmail("ada@example.com"), queue="email")
    await client.insert(SendEmail("bob@example.com"), queue="email")
    job = await awa.testing.assert_enqueued(client, kind="send_email",
                                            args={"to": "ada@example.com"})  # fmt: skip
    assert job.args == {"to": "ada@example.com"}
    await awa.testing.assert_enqueued(client, queue="email", count=2)
    with pytest.raises(AssertionError, match="candidates: #"):
        await awa.testing.assert_enqueued(client, kind="send_email", args={"to": "eve@x"})
    with pytest.raises(AssertionError, match="expected 1 job"):
        await awa.testing.assert_enqueued(client, kind="send_email", count=1)
    with pytest.raises(awa.ValidationError):
        await awa.testing.assert_enqueued(client)


async def test_assert_enqueued_compares_args_as_insert_stored_them(
    client: awa.AsyncClient,
) -> None:
    """Tuples, nested dataclasses, Decimal and UUID are stored as their JSON: expected
    args are compared the same way, not as Python values against JSON."""
    report = {"at": (1, 2), "to": SendEmail("ada@example.com")}
    inserted = await client.insert(report, kind="report")
    found = await awa.testing.assert_enqueued(client, kind="report", args=report)
    assert found.id == inserted.id
    charge = Charge(amount=Decimal("1.10"), uid=UUID(int=7))
    inserted = await client.insert(charge)
    found = await awa.testing.assert_enqueued(client, kind="charge", args=charge)
    assert found.id == inserted.id
    with pytest.raises(AssertionError, match="candidates"):
        await awa.testing.assert_enqueued(client, args=Charge(amount=Decimal(2), uid=UUID(int=7)))


async def test_work_one_gives_back_every_connection_it_took(database_url: str) -> None:
    """Each call's claim lane and completer return their connections when it ends."""
    async with awa.AsyncClient(database_url, max_connections=10) as client:

        @client.task(SendEmail, queue="email")
        async def send(job: awa.Job[SendEmail]) -> None:
            pass

        await client.insert_many([SendEmail(f"{i}@example.com") for i in range(3)])
        for _ in range(3):
            done = await awa.testing.work_one(client, queue="email")
            assert done is not None and done.state is awa.JobState.COMPLETED
        stats = client._pool.get_stats()  # type: ignore[union-attr]
        assert stats["pool_available"] == stats["pool_size"]


async def test_inline_inserts_made_together_each_get_their_own_outcome(
    client: awa.AsyncClient,
) -> None:
    import asyncio

    @client.task(None, kind="n", queue="q")
    async def numbered(job: awa.Job[Any]) -> None:
        if job.args["n"] == 2:
            raise ValueError("two")

    async with awa.testing.inline(client):
        jobs = await asyncio.gather(*(client.insert({"n": n}, kind="n") for n in (1, 2, 3)))
    assert [job.args["n"] for job in jobs] == [1, 2, 3]
    states = [job.state for job in jobs]
    assert states == [awa.JobState.COMPLETED, awa.JobState.RETRYABLE, awa.JobState.COMPLETED]


@pytest.mark.timeout(120)
def test_the_helpers_with_a_sync_client(database_url: str) -> None:
    import asyncio

    with awa.Client(database_url, max_connections=3) as sync:

        @sync.task(None, kind="s", queue="s")
        def handler(job: awa.Job[Any]) -> None:
            return None

        sync.insert_many([{"i": i} for i in range(5)], kind="s")
        done = asyncio.run(awa.testing.drain_queue(sync, "s"))  # used to hang
        assert [job.state for job in done] == [awa.JobState.COMPLETED] * 5
        asyncio.run(awa.testing.assert_enqueued(sync, kind="s", count=5))

        async def inline_refused() -> None:
            async with awa.testing.inline(sync):
                pass

        with pytest.raises(awa.ValidationError, match="AsyncClient"):
            asyncio.run(inline_refused())


async def test_assert_enqueued_with_count_0_asserts_there_is_none(
    client: awa.AsyncClient,
) -> None:
    assert await awa.testing.assert_enqueued(client, kind="never", count=0) is None
    await client.insert({}, kind="once")
    with pytest.raises(AssertionError, match="expected 0"):
        await awa.testing.assert_enqueued(client, kind="once", count=0)


async def test_every_helper_leaves_a_paused_queue_alone_as_a_worker_does(
    client: awa.AsyncClient,
) -> None:
    ran: list[str] = []

    @client.task(SendEmail, queue="email")
    async def send(job: awa.Job[SendEmail]) -> None:
        ran.append(job.args.to)

    waiting = await client.insert(SendEmail("a@example.com"))
    await client.pause_queue("email")
    assert await awa.testing.work_one(client, "email") is None
    assert not await awa.testing.work_one(client, SendEmail)  # "no_job"
    async with awa.testing.inline(client):
        inserted = await client.insert(SendEmail("b@example.com"))
    assert inserted.state is awa.JobState.AVAILABLE  # inserted, not run
    assert ran == [] and (await client.get_job(waiting.id)).state is awa.JobState.AVAILABLE
    await client.resume_queue("email")
    result = await awa.testing.work_one(client, SendEmail)
    assert result.outcome == "completed" and ran == ["a@example.com"]


async def test_work_one_returns_a_job_it_handed_back_for_want_of_a_handler(
    client: awa.AsyncClient,
) -> None:
    stranger = await client.insert({}, kind="nobody_here", queue="q")
    job = await awa.testing.work_one(client, "q")
    assert job is not None and job.id == stranger.id
    assert job.state is awa.JobState.SCHEDULED and job.metadata["unknown_kind"]["count"] == 1


@pytest.mark.skipif(not hasattr(asyncio, "eager_task_factory"), reason="Python 3.12+")
async def test_work_one_under_an_eager_task_factory(client: awa.AsyncClient) -> None:
    """The handler starts inside the launch with an eager factory: work_one hung (its
    completer never ran), then reported no_job for the job it had just run (a review)."""
    ran: list[str] = []

    @client.task(SendEmail, queue="email")
    async def send(job: awa.Job[SendEmail]) -> None:
        ran.append(job.args.to)

    await client.insert(SendEmail("ada@example.com"))
    loop = asyncio.get_running_loop()
    loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
    try:
        result = await asyncio.wait_for(awa.testing.work_one(client, SendEmail), 30)
    finally:
        loop.set_task_factory(None)
    assert ran == ["ada@example.com"]
    assert result.outcome == "completed"


@dataclasses.dataclass
class Refund:
    cents: int


@dataclasses.dataclass
class Payout:
    cents: int


def test_the_blocking_twins_in_a_plain_test(sync_client: awa.Client) -> None:
    """A plain test calling the coroutine helpers without await passed having checked
    nothing (a review): the ``*_sync`` twins run and raise."""

    @sync_client.task(SendEmail, queue="mail")
    def send(job: awa.Job[SendEmail]) -> None:
        return None

    with pytest.raises(AssertionError, match="no job enqueued"):
        awa.testing.assert_enqueued_sync(sync_client, kind="send_email")
    sync_client.insert(SendEmail("a@example.com"))
    sync_client.insert(SendEmail("b@example.com"))
    found = awa.testing.assert_enqueued_sync(sync_client, args=SendEmail("a@example.com"))
    assert found.args == {"to": "a@example.com"}
    job = awa.testing.work_one_sync(sync_client, "mail")
    assert job is not None and job.state is awa.JobState.COMPLETED
    assert [j.state for j in awa.testing.drain_queue_sync(sync_client, "mail")] == [
        awa.JobState.COMPLETED
    ]
    sync_client.insert(SendEmail("c@example.com"))
    result = awa.testing.work_one_sync(sync_client, SendEmail, handler=lambda job: None)
    assert result.outcome == "completed"
    sync_client.insert(SendEmail("d@example.com"))
    assert awa.testing.clean_sync(sync_client) == 4
    awa.testing.assert_enqueued_sync(sync_client, kind="send_email", count=0)


async def test_the_blocking_twins_refuse_an_async_client(client: awa.AsyncClient) -> None:
    with pytest.raises(awa.ValidationError, match=r"await awa\.testing\.clean"):
        awa.testing.clean_sync(client)  # type: ignore[arg-type]


async def test_an_args_instance_stands_for_its_kind(client: awa.AsyncClient) -> None:
    await client.insert(Refund(500))
    with pytest.raises(AssertionError, match="no job enqueued"):
        await awa.testing.assert_enqueued(client, args=Payout(500))  # same fields, not a payout
    assert (await awa.testing.assert_enqueued(client, args=Refund(500))).kind == "refund"


async def test_the_helpers_say_the_schema_is_not_migrated(empty_database_url: str) -> None:
    client = awa.AsyncClient(empty_database_url)
    try:
        for call in (
            awa.testing.clean(client),
            awa.testing.work_one(client, "q"),
            awa.testing.drain_queue(client, "q"),
            awa.testing.work_one(client, SendEmail, handler=lambda job: None),
        ):
            with pytest.raises(awa.SchemaNotMigrated):
                await call
    finally:
        await client.close()


async def test_work_one_returns_a_dead_lettered_job_as_the_dlq_holds_it(
    client: awa.AsyncClient, db: Any
) -> None:
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('dl', true)")

    @client.task(None, kind="declines", queue="dl")
    async def declines(job: awa.Job[Any]) -> None:
        raise ValueError("declined")

    await client.insert({}, kind="declines", queue="dl", max_attempts=1)
    job = await awa.testing.work_one(client, "dl")
    assert job is not None and job.state is awa.JobState.FAILED
    assert [e["error"] for e in job.errors] == ["declined"] and job.finalized_at is not None
    assert await client.dlq_depth("dl") == 1


async def test_clean_under_a_running_worker_keeps_its_dlq_and_schedules(
    client: awa.AsyncClient, db: Any
) -> None:
    @client.task(None, kind="tick", queue="dl")
    async def tick(job: awa.Job[Any]) -> None:
        return None

    client.periodic("every_hour", "0 * * * *", {}, kind="tick", queue="dl")
    await client.start([awa.QueueConfig("dl", max_workers=1, dlq=True)])
    try:
        await awa.testing.clean(client)
        assert db.execute("SELECT dlq FROM awa.queue_meta WHERE queue = 'dl'").fetchone() == (True,)
        names = db.execute("SELECT name FROM awa.cron_schedules").fetchall()
        assert names == [("every_hour",)]
    finally:
        await client.shutdown(timeout_ms=2_000)
