"""Durable batch operations on real PostgreSQL: preview then apply move_queue and
set_priority over a filter, in bounded chunks, cancellable, resumable, with progress."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import awa
from awa.client import batch
from awa.maintenance import pruner
from awa.worker import upkeep
from tests.helpers import FAST_WORKER, lead_maintenance, noop_task, wait_for


def _queues(db: psycopg.Connection[Any]) -> dict[int, tuple[str, int, int, str]]:
    rows = db.execute(
        "SELECT id, queue, priority, original_priority, state::text FROM awa.jobs"
    ).fetchall()
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


async def _jobs(client: awa.AsyncClient, n: int, **options: Any) -> list[int]:
    jobs = await client.insert_many([{"i": i} for i in range(n)], **options)
    return [j.id for j in jobs]


async def test_preview_counts_and_samples_without_changing_anything(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    mail = await _jobs(client, 5, kind="send", queue="mail")
    other_kind = await _jobs(client, 2, kind="report", queue="mail")
    already = await _jobs(client, 1, kind="send", queue="slow")
    db.execute("UPDATE awa.jobs SET state = 'running' WHERE id = %s", (mail[0],))
    db.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (mail[1],))
    db.execute("UPDATE awa.jobs SET state = 'retryable' WHERE id = %s", (mail[2],))
    before = _queues(db)

    preview = await client.preview_batch(awa.MoveQueue("slow"), kind="send", sample=2)
    assert preview.total == 3  # running, failed and already-there jobs are left out
    assert [j.id for j in preview.sample] == [mail[2], mail[3]]
    by_state = await client.preview_batch(awa.MoveQueue("slow"), kind="send", state="retryable")
    assert by_state.total == 1 and by_state.sample[0].id == mail[2]
    by_ids = await client.preview_batch(awa.SetPriority(1), ids=[*other_kind, already[0], 10**9])
    assert by_ids.total == 3
    narrowed = await client.preview_batch(awa.SetPriority(1), ids=other_kind, queue="slow")
    assert narrowed == awa.BatchPreview(0, [])  # filters intersect
    assert _queues(db) == before


async def test_apply_moves_in_chunks_reporting_progress(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 10, kind="send", queue="mail")
    untouched = await _jobs(client, 2, kind="report", queue="mail")
    seen: list[tuple[str, int, int]] = []

    def progress(op: awa.BatchOperation) -> None:
        seen.append((op.state, op.processed, op.skipped))

    done = await client.apply_batch(
        awa.MoveQueue("slow"), kind="send", chunk_size=3, submitted_by="ops", on_progress=progress
    )
    assert done.state == "completed" and done.done and done.percent == 100.0
    assert (done.total, done.processed, done.skipped) == (10, 10, 0)
    assert done.submitted_by == "ops" and done.finalized_at is not None
    assert seen == [("running", 3, 0), ("running", 6, 0), ("running", 9, 0), ("completed", 10, 0)]
    rows = _queues(db)
    assert {rows[i][0] for i in ids} == {"slow"}
    assert {rows[i][0] for i in untouched} == {"mail"}
    assert await client.get_batch(done.id) == done
    items = db.execute("SELECT count(*) FROM awa.batch_operation_items").fetchone()
    assert items == (0,)  # an ended operation keeps its counts, not its items


async def test_set_priority_survives_aging_and_promotion(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 4, kind="k", queue="q", priority=4)
    op = await client.apply_batch(awa.SetPriority(1), queue="q", chunk_size=100)
    assert op.processed == 4
    rows = _queues(db)
    assert {rows[i][1:3] for i in ids} == {(1, 1)}  # priority and original_priority


async def test_jobs_that_moved_on_are_skipped(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 6, kind="send", queue="mail")
    op = await client.apply_batch(awa.MoveQueue("slow"), queue="mail", wait=False)
    assert op.state == "pending" and op.total == 6 and op.processed == 0
    db.execute("UPDATE awa.jobs SET state = 'running' WHERE id = %s", (ids[0],))
    db.execute("UPDATE awa.jobs SET queue = 'elsewhere' WHERE id = %s", (ids[1],))
    db.execute("DELETE FROM awa.jobs WHERE id = %s", (ids[2],))
    late = await client.insert({}, kind="send", queue="mail")  # not in the snapshot
    done = await client.run_batch(op.id)
    assert (done.state, done.processed, done.skipped) == ("completed", 3, 3)
    rows = _queues(db)
    assert rows[ids[0]][0] == "mail" and rows[ids[1]][0] == "elsewhere"
    assert rows[late.id][0] == "mail"


async def test_cancel_stops_between_chunks(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 9, kind="k", queue="q")
    cancelled: list[awa.BatchOperation] = []

    async def cancel_after_first(op: awa.BatchOperation) -> None:
        if not cancelled:
            cancelled.append(await client.cancel_batch(op.id))

    final = await client.apply_batch(
        awa.MoveQueue("other"), queue="q", chunk_size=3, on_progress=cancel_after_first
    )
    assert cancelled[0].state == "cancelled" and cancelled[0].processed == 3
    assert (final.state, final.processed) == ("cancelled", 3)
    rows = _queues(db)
    assert [rows[i][0] for i in ids] == ["other"] * 3 + ["q"] * 6
    assert await client.cancel_batch(final.id) == final  # ended: returned as it is
    # A cancel is final: "resuming" it returned it as it was, saying nothing (a review).
    with pytest.raises(awa.ValidationError, match="was cancelled, which is final"):
        await client.run_batch(final.id)


async def test_an_interrupted_operation_resumes_where_it_stopped(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 7, kind="k", queue="q")
    op = await client.apply_batch(awa.SetPriority(1), queue="q", chunk_size=2, wait=False)
    partial = await batch.run(await client._get_pool(), op.id, max_chunks=2)  # then "crash"
    assert (partial.state, partial.processed) == ("running", 4)
    done = await client.run_batch(op.id)
    assert (done.state, done.processed, done.skipped) == ("completed", 7, 0)
    assert {_queues(db)[i][1] for i in ids} == {1}


async def test_two_runners_of_one_operation_never_double_count(
    client: awa.AsyncClient,
) -> None:
    await _jobs(client, 40, kind="k", queue="q")
    op = await client.apply_batch(awa.MoveQueue("r"), queue="q", chunk_size=3, wait=False)
    async with awa.AsyncClient(client.database_url) as other:
        first, second = await asyncio.gather(client.run_batch(op.id), other.run_batch(op.id))
    for result in (first, second):
        assert (result.state, result.processed, result.skipped) == ("completed", 40, 0)


async def _carried_by_a_leader(
    client: awa.AsyncClient, op_id: int, timeout: float = 15.0
) -> awa.BatchOperation:
    """Start a worker (its leader carries operations nobody runs); the operation ended."""
    noop_task(client, queue="idle")
    await client.start([("idle", 1)], **FAST_WORKER)
    try:

        async def completed() -> awa.BatchOperation | None:
            current = await client.get_batch(op_id)
            return current if current.done else None

        done: awa.BatchOperation = await wait_for(completed, timeout=timeout)
        return done
    finally:
        await client.shutdown()


async def test_the_leader_carries_on_operations_nobody_runs(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 5, kind="k", queue="q")
    op = await client.apply_batch(awa.MoveQueue("later"), queue="q", chunk_size=2, wait=False)
    done = await _carried_by_a_leader(client, op.id)
    assert (done.state, done.processed) == ("completed", 5)
    assert {_queues(db)[i][0] for i in ids} == {"later"}
    assert [b.id for b in await client.list_batches(state="completed")] == [op.id]


async def test_the_leader_keeps_on_with_an_operation_it_advanced(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader runs at most 100 chunks of an operation a tick; its own chunks made the
    operation look advanced by someone, so it waited the staleness (5 s) between bursts
    (a review: a detached operation took 67 s for 15 s of work). It carries on with what
    it advanced at its previous tick."""
    monkeypatch.setattr(upkeep, "BATCH_STALE_MS", 3_600_000)  # never stale in this test
    ids = await _jobs(client, 250, kind="k", queue="q")
    op = await client.apply_batch(awa.MoveQueue("later"), queue="q", chunk_size=1, wait=False)
    done = await _carried_by_a_leader(client, op.id, timeout=60)
    assert (done.state, done.processed) == ("completed", 250)
    assert {_queues(db)[i][0] for i in ids} == {"later"}


async def test_bad_requests_write_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await _jobs(client, 2, kind="k", queue="q")
    cases = [
        (lambda: client.apply_batch("move", queue="q"), "op"),  # type: ignore[arg-type]
        (lambda: client.apply_batch(awa.MoveQueue("x"), state="running"), "state"),
        (lambda: client.apply_batch(awa.MoveQueue("x"), state="bogus"), "state"),
        (lambda: client.apply_batch(awa.MoveQueue("x")), "filter"),
        (lambda: client.apply_batch(awa.MoveQueue("x"), queue="q", chunk_size=0), "chunk_size"),
        (lambda: client.apply_batch(awa.MoveQueue("x"), ids=[]), "ids"),
        (lambda: client.apply_batch(awa.MoveQueue("x"), ids=[0]), "ids[]"),
        (lambda: client.preview_batch(awa.SetPriority(1), queue="q", sample=0), "sample"),
        (lambda: client.list_batches(state="done"), "state"),
        (lambda: client.get_batch(0), "operation_id"),
        # A string is truthy: "no" waited (a review).
        (lambda: client.apply_batch(awa.MoveQueue("x"), queue="q", wait="no"), "wait"),  # type: ignore[arg-type]
    ]
    for call, field in cases:
        with pytest.raises(awa.ValidationError) as caught:
            await call()
        assert caught.value.field == field
    for make, field in ((lambda: awa.MoveQueue(""), "queue"), (lambda: awa.SetPriority(5),
                                                                 "priority")):  # fmt: skip
        with pytest.raises(awa.ValidationError) as caught:
            make()
        assert caught.value.field == field
    with pytest.raises(awa.BatchNotFound):
        await client.get_batch(12345)
    assert db.execute("SELECT count(*) FROM awa.batch_operations").fetchone() == (0,)
    everything = await client.apply_batch(awa.SetPriority(3), allow_all=True)
    assert everything.processed == 2


def test_sync_client_batch_operations(sync_client: awa.Client) -> None:
    sync_client.insert_many([{"i": i} for i in range(3)], kind="k", queue="q")
    assert sync_client.preview_batch(awa.MoveQueue("r"), queue="q").total == 3
    progress: list[int] = []
    op = sync_client.apply_batch(
        awa.MoveQueue("r"),
        queue="q",
        chunk_size=2,
        on_progress=lambda o: progress.append(o.processed),
    )
    assert op.processed == 3 and progress == [2, 3]
    assert sync_client.list_batches()[0].id == op.id
    assert sync_client.cancel_batch(op.id).state == "completed"


async def test_a_moved_job_leaves_its_partition_behind(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ids = await _jobs(client, 3, kind="k", queue="partitioned")
    # As a claimer of a partitioned queue leaves them once it has adopted them.
    db.execute("UPDATE awa.jobs SET partition_key = 'customer-7' WHERE id = ANY(%s)", (ids,))
    await client.apply_batch(awa.SetPriority(1), ids=ids[:1])
    await client.apply_batch(awa.MoveQueue("plain"), ids=ids[1:])
    rows = db.execute(
        "SELECT id, partition_key FROM awa.jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    assert rows == [(ids[0], "customer-7"), (ids[1], None), (ids[2], None)]


async def test_the_leader_prunes_operations_ended_past_the_retention(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    await _jobs(client, 3, kind="k", queue="q")
    old = await client.apply_batch(awa.SetPriority(1), queue="q")
    cancelled = await client.apply_batch(awa.SetPriority(2), queue="q", wait=False)
    await client.cancel_batch(cancelled.id)
    recent = await client.apply_batch(awa.SetPriority(3), queue="q")
    open_op = await client.apply_batch(awa.SetPriority(4), queue="q", wait=False)
    db.execute(
        "UPDATE awa.batch_operations SET finalized_at = now() - interval '8 days'"
        " WHERE id = ANY(%s)",
        ([old.id, cancelled.id],),
    )
    db.execute(  # an open operation is never pruned, however old
        "UPDATE awa.batch_operations SET created_at = now() - interval '9 days' WHERE id = %s",
        (open_op.id,),
    )
    pool = await client._get_pool()
    assert await pruner.prune_ended_batches(pool, 7 * 24 * 3_600_000, lead_maintenance(db)) == 2
    assert sorted(b.id for b in await client.list_batches()) == [recent.id, open_op.id]
