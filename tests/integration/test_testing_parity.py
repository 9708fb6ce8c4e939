"""awa.testing.work_one(client, ArgsType, handler=...) and awa.testing.clean()."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

import awa
import awa.testing


@dataclasses.dataclass
class Charge:
    cents: int


@dataclasses.dataclass
class Refund:
    cents: int


async def test_work_one_with_a_handler_reports_each_outcome(client: awa.AsyncClient) -> None:
    registered: list[int] = []

    @client.task(Charge, queue="billing")
    async def real(job: awa.Job[Charge]) -> None:
        registered.append(job.args.cents)

    async def scripted(job: awa.Job[Charge]) -> Any:
        assert isinstance(job.args, Charge)  # decoded into the type
        cents = job.args.cents
        if cents == 1:
            return None
        if cents == 2:
            raise ValueError("card declined")
        if cents == 3:
            return awa.Snooze(60)
        if cents == 4:
            return awa.Cancel("duplicate")
        if cents == 5:
            raise awa.TerminalError("fraud")
        return awa.WaitForCallback(await job.register_callback())

    empty = await awa.testing.work_one(client, Charge, handler=scripted)
    assert empty.outcome == "no_job" and empty.job is None and not empty
    for cents in range(1, 7):
        await client.insert(Charge(cents))
    await client.insert(Refund(1), queue="billing")  # another kind: never picked up
    results = [await awa.testing.work_one(client, Charge, handler=scripted) for _ in range(6)]
    assert [r.outcome for r in results] == [
        "completed", "retried", "snoozed", "cancelled", "failed", "waiting_external"
    ]  # fmt: skip
    assert all(results)
    assert [r.job.args["cents"] for r in results if r.job is not None] == [1, 2, 3, 4, 5, 6]
    assert results[1].error == "card declined" and results[1].job is not None
    assert results[1].job.state is awa.JobState.RETRYABLE and results[1].job.attempt == 1
    assert results[2].job is not None and results[2].job.attempt == 0  # snooze refunds
    assert results[3].error == "duplicate" and results[4].error == "fraud"
    assert registered == []  # the registered handler was never called nor replaced
    assert client.registry.get("charge") is not None
    assert client.registry.get("charge").handler is real  # type: ignore[union-attr]
    refund = (await client.list_jobs(kind="refund"))[0]
    assert refund.state is awa.JobState.AVAILABLE


async def test_work_one_defaults_to_the_registered_handler_and_its_queue(
    client: awa.AsyncClient,
) -> None:
    @client.task(Charge, queue="billing")
    def charge(job: awa.Job[Charge]) -> None:  # a plain def handler
        if job.args.cents < 0:
            raise ValueError("negative")

    await client.insert(Charge(-1), max_attempts=1)
    result = await awa.testing.work_one(client, Charge)
    assert result.outcome == "failed" and result.error == "negative"

    with pytest.raises(awa.ValidationError) as caught:
        await awa.testing.work_one(client, Refund)  # nothing registered for it
    assert caught.value.field == "handler"
    await client.insert({"x": 1}, kind="custom", queue="other")
    got = await awa.testing.work_one(
        client, dict, handler=lambda job: None, kind="custom", queue="other"
    )
    assert got.outcome == "completed" and got.job is not None and got.job.args == {"x": 1}


def test_work_one_on_the_sync_client(sync_client: awa.Client) -> None:
    import asyncio

    sync_client.insert(Charge(1), queue="default")
    result = asyncio.run(awa.testing.work_one(sync_client, Charge, handler=lambda job: None))
    assert result.outcome == "completed"


async def test_clean_empties_every_table(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await client.insert_many([{"i": i} for i in range(3)], kind="k", queue="q")
    failed = await client.insert({}, kind="k", queue="q")
    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (failed.id,))
    await client.move_failed_to_dlq(failed.id)
    await client.pause_queue("q")
    await client.set_queue_limits("q", concurrency=2, rate_limit=5.0)
    await client.apply_batch(awa.SetPriority(1), queue="q", wait=False)
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at, "
        "last_seen_at) VALUES (gen_random_uuid(), 'h', 1, now(), now())"
    )
    assert await awa.testing.clean(client) == 3
    tables = [r[0] for r in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'awa'")]
    assert "batch_operations" in tables and "queue_limits" in tables
    # Every table awa has, whoever added it, except its singletons (version, leader lease).
    for table in set(tables) - {"schema_version", "leader_lease"}:
        row = db.execute(f"SELECT count(*) FROM awa.{table}").fetchone()
        assert row == (0,), table
    assert (await client.insert({}, kind="k")).state is awa.JobState.AVAILABLE  # still usable
