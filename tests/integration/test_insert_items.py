"""``insert_many`` with per-job options (``awa.InsertItem``) on real PostgreSQL."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa


@dataclasses.dataclass
class Ping:
    n: int


def _rows(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT kind, queue, priority, state::text, max_attempts, tags, metadata, "
        "unique_key IS NOT NULL FROM awa.jobs ORDER BY id"
    ).fetchall()


async def test_each_item_keeps_its_own_options(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    @client.task(Ping, queue="pings")
    async def ping(job: awa.Job[Ping]) -> None:
        return None

    later = datetime.now(UTC) + timedelta(hours=1)
    jobs = await client.insert_many(
        [
            Ping(1),  # the call's options, the queue its task was registered on
            awa.InsertItem(Ping(2), queue="vip", priority=1, tags=["a"]),
            awa.InsertItem(Ping(3), run_at=later, max_attempts=3, metadata={"m": 1}),
            awa.InsertItem({"raw": 2}, kind="other", unique_opts={"by_args": True}),
            Ping(4),  # plain args after items still share the call's options
        ],
        priority=3,
        tags=["shared"],
    )
    assert [j.queue for j in jobs] == ["pings", "vip", "pings", "default", "pings"]
    assert [j.priority for j in jobs] == [3, 1, 3, 3, 3]
    assert jobs[2].state is awa.JobState.SCHEDULED and jobs[2].run_at == later
    assert _rows(db) == [
        ("ping", "pings", 3, "available", 25, ["shared"], {}, False),
        ("ping", "vip", 1, "available", 25, ["a"], {}, False),
        ("ping", "pings", 3, "scheduled", 3, ["shared"], {"m": 1}, False),
        ("other", "default", 3, "available", 25, ["shared"], {}, True),
        ("ping", "pings", 3, "available", 25, ["shared"], {}, False),
    ]


async def test_unique_per_item_is_enforced_and_all_or_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    unique = {"by_args": True}
    await client.insert_many(
        [awa.InsertItem({"order": 1}, kind="ship", unique_opts=unique), {"order": 1}],
        kind="ship",
    )  # the plain duplicate has no unique key: both are written
    assert len(_rows(db)) == 2
    with pytest.raises(awa.UniqueConflict):
        await client.insert_many(
            [{"order": 9}, awa.InsertItem({"order": 1}, kind="ship", unique_opts=unique)],
            kind="ship",
        )
    with pytest.raises(awa.UniqueConflict):  # two items of one call colliding
        await client.insert_many(
            [awa.InsertItem({"order": 2}, unique_opts=unique)] * 2, kind="ship"
        )
    assert len(_rows(db)) == 2  # nothing of the failed calls was written


async def test_a_batch_repeating_a_unique_key_names_both_elements(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """The COPY failed on the second copy with "already exists" and no job or element
    named (a review): no such job existed, the duplicate was inside the batch."""
    unique = {"by_args": True}
    with pytest.raises(awa.UniqueConflict, match=r"args_list\[1\] and args_list\[3\]") as caught:
        await client.insert_many([Ping(1), Ping(2), Ping(3), Ping(2)], unique_opts=unique)
    assert caught.value.existing_id is None and caught.value.unique_key is not None
    items = [{"o": 1}, awa.InsertItem({"o": 1}, kind="ship", unique_opts=unique)]
    with pytest.raises(awa.UniqueConflict, match=r"args_list\[0\] and args_list\[1\]"):
        await client.insert_many(items, kind="ship", unique_opts=unique)
    async with client.transaction() as tx:  # refused before any statement: tx goes on
        with pytest.raises(awa.UniqueConflict, match="same unique key"):
            await tx.insert_many([Ping(5), Ping(5)], unique_opts=unique)
        await tx.insert(Ping(6))
    # Same args, different kinds: different keys, both written.
    await client.insert_many(
        [{"o": 1}, awa.InsertItem({"o": 1}, kind="b", unique_opts=unique)],
        kind="a",
        unique_opts=unique,
    )
    assert [row[0] for row in _rows(db)] == ["ping", "a", "b"]


async def test_a_bad_item_is_named_by_its_position(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    for item, field in (
        (awa.InsertItem({"x": 1}, kind="k", priority=9), "args_list[1].priority"),
        (awa.InsertItem({"x": 1}, kind="k", run_at=datetime(2030, 1, 1)), "args_list[1].run_at"),
        (awa.InsertItem({"x": 1}, kind="k", queue=""), "args_list[1].queue"),
    ):
        with pytest.raises(awa.ValidationError) as caught:
            await client.insert_many([{"ok": 1}, item], kind="k")
        assert caught.value.field == field
    with pytest.raises(awa.ValidationError) as caught:  # no kind: neither the item's nor the call's
        await client.insert_many([awa.InsertItem({"x": 1})])
    assert caught.value.field == "args_list[0].kind"
    assert _rows(db) == []


async def test_items_in_a_transaction_and_on_the_sync_client(
    client: awa.AsyncClient, sync_client: awa.Client, db: psycopg.Connection[Any]
) -> None:
    async with client.transaction() as tx:
        jobs = await tx.insert_many([awa.InsertItem({"a": 1}, kind="t", queue="tx")], kind="x")
    assert jobs[0].kind == "t" and jobs[0].queue == "tx"
    (job,) = sync_client.insert_many([awa.InsertItem({"b": 1}, kind="s", priority=4)])
    assert job.priority == 4 and len(_rows(db)) == 2


async def test_an_insert_item_given_as_args_is_refused_not_stored(
    client: awa.AsyncClient,
) -> None:
    item = awa.InsertItem({"a": 1}, kind="k", queue="vip", priority=1)
    with pytest.raises(awa.ValidationError) as caught:
        await client.insert(item)
    assert caught.value.field == "args"
    with pytest.raises(awa.ValidationError) as nested:
        await client.insert_many([awa.InsertItem(item)])
    assert nested.value.field == "args_list[0].args"
    assert await client.list_jobs() == []


async def test_a_bad_plain_element_is_named_by_its_place_in_the_list(
    client: awa.AsyncClient,
) -> None:
    cases = [
        ([awa.InsertItem({"a": 1}, kind="k"), {"b": "x\x00y"}], "args_list[1].args"),
        ([{"a": 1}, {"a": 2}, {"a": "x" * (1 << 20)}], "args_list[2].args"),
    ]
    for args_list, field in cases:
        with pytest.raises(awa.ValidationError) as caught:
            await client.insert_many(args_list, kind="k")
        assert caught.value.field == field
    with pytest.raises(awa.ValidationError) as no_kind:
        await client.insert_many([awa.InsertItem({"a": 1}, kind="k"), {"b": 2}])
    assert no_kind.value.field == "args_list[1].kind"
    with pytest.raises(awa.SerializationError, match=r"args_list\[1\]"):
        await client.insert_many([{"a": 1}, {"a": object()}], kind="k")
    assert await client.list_jobs() == []
