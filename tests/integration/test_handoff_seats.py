"""Handoff seats (ADR 0045): an idle worker's permits parked in the database, and a job
claimed for it at its insert's commit, handed over in the commit's notice."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg
import pytest

import awa
from awa.client.seat_outlook import MISSES, REST_S, SeatOutlook
from tests.helpers import FAST_WORKER, wait_for


def _worker(client: awa.AsyncClient) -> Any:
    return client._worker  # internal handle, for the counters the tests observe


def _seats(db: psycopg.Connection[Any], queue: str = "q") -> int:
    row = db.execute(
        "SELECT count(*) FROM awa.handoff_seats WHERE queue = %s AND job_id IS NULL", (queue,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _untaken(db: psycopg.Connection[Any]) -> int:
    with db.transaction():
        rows = db.execute(
            "SELECT seat_id FROM awa.handoff_seats WHERE job_id IS NULL FOR UPDATE SKIP LOCKED"
        ).fetchall()
    return len(rows)


async def _parked(db: psycopg.Connection[Any], n: int, queue: str = "q") -> None:
    async def parked() -> bool:
        return _seats(db, queue) == n

    await wait_for(parked)


async def _start(
    client: awa.AsyncClient, ran: list[int], workers: int = 8, queue: Any = None, **settings: Any
) -> None:
    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        ran.append(job.id)

    await client.start([queue or ("q", workers)], **{**FAST_WORKER, **settings})


async def test_an_idle_queue_parks_seats_and_an_insert_is_handed_over(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        dispatcher = _worker(client).dispatchers["q"]
        claims_before = dispatcher.polls
        job = await client.insert({"x": 1}, kind="k", queue="q")
        done = await wait_for(lambda: _completed(client, job.id))
        assert done.attempt == 1 and ran == [job.id]
        assert dispatcher.handoffs == 1
        # Handed over, not claimed: the dispatcher made no claim for it, and the seat it
        # used is parked again.
        assert dispatcher.polls == claims_before
        await _parked(db, 4)
    finally:
        await client.shutdown()
    assert _seats(db) == 0  # a stopping worker releases its seats


class _HostBehind:
    """The ``time`` module of a host whose clock runs 90 s behind the database's."""

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def time() -> float:
        return time.time() - 90


async def test_the_seater_learns_how_far_its_hosts_clock_is_from_the_databases(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handed-over job's claim is stamped by the database; its age read with a host
    clock 90 s behind skipped the re-check of an old claim after a freeze, and the job ran
    a second time (a review of skewed hosts). The seater measures the offset as it parks
    seats, and the dispatcher reads the claim's age with it."""
    import awa.worker.seats

    monkeypatch.setattr(awa.worker.seats, "time", _HostBehind)
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        seater = _worker(client).seater

        async def measured() -> bool:  # the rows commit before the seater reads its answer
            return seater.clock_offset_s != 0.0

        await wait_for(measured)
        assert 85 < seater.clock_offset_s < 95
    finally:
        await client.shutdown()


async def test_a_release_of_seats_that_cannot_reach_the_database_does_not_hold_up_shutdown(
    client: awa.AsyncClient, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """With the database down, the release of the free seats at shutdown waited the pool's
    30 s for a connection, outside the shutdown's bound (and ahead of another client's
    shutdown in the process; a review). It is bounded: the seats lapse by themselves."""
    ran: list[int] = []
    await _start(client, ran)
    await _parked(db, 4)
    seater = _worker(client).seater

    async def unreachable(seat_ids: list[int]) -> None:
        await asyncio.Event().wait()  # a connection that never comes

    seater._release = unreachable
    await client.shutdown(timeout_ms=100)  # returns: the release was given up
    assert "handoff seats: could not release them" in caplog.text


async def test_a_producer_finding_no_seats_rests_from_looking_then_looks_again(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """ADR 0049: once MISSES single inserts of a queue in a row found no idle worker's
    seat, the producer stops looking for REST_S; its jobs meanwhile wake the queue as
    jobs without a seat do, and run. After the rest an insert takes a seat again."""
    now = [1000.0]
    client._seat_outlook = SeatOutlook(lambda: now[0])  # the producer's clock, by hand
    first = [(await client.insert({}, kind="k", queue="q")).id for _ in range(MISSES)]
    ran: list[int] = []
    await _start(client, ran)  # drains the first jobs, then parks seats
    try:
        await wait_for(lambda: _all_completed(client, first))
        await _parked(db, 4)
        dispatcher = _worker(client).dispatchers["q"]
        resting = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, resting.id))
        assert dispatcher.handoffs == 0  # claimed after its notice, no seat taken
        await _parked(db, 4)
        now[0] += REST_S
        looked = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, looked.id))
        assert dispatcher.handoffs == 1
    finally:
        await client.shutdown()


async def _completed(client: awa.AsyncClient, job_id: int) -> awa.Job[Any] | None:
    job = await client.get_job(job_id)
    return job if job.state is awa.JobState.COMPLETED else None


async def test_a_rolled_back_insert_leaves_the_seat(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        with pytest.raises(RuntimeError):
            async with client.transaction() as tx:
                await tx.insert({}, kind="k", queue="q")
                assert _untaken(db) == 3  # one taken (locked by this transaction), not used
                raise RuntimeError("roll back")
        assert _seats(db) == 4
        job = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id] and _worker(client).dispatchers["q"].handoffs == 1
    finally:
        await client.shutdown()


async def test_a_seat_waits_for_its_transaction_and_claims_at_commit(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """The claim happens at commit, with the clock at commit: a transaction open longer
    than the heartbeat staleness window does not hand over a job the rescuer would take."""
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        async with client.transaction() as tx:
            job = await tx.insert({}, kind="k", queue="q")
            await asyncio.sleep(2.0)  # longer than FAST_WORKER's staleness of 1.5 s
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id]
        assert _worker(client).dispatchers["q"].handoffs == 1
        row = db.execute("SELECT attempt, errors FROM awa.jobs WHERE id = %s", (job.id,))
        assert row.fetchone() == (1, [])  # never rescued
    finally:
        await client.shutdown()


async def test_a_paused_queue_parks_no_seats_and_a_pause_beats_a_taken_seat(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        async with client.transaction() as tx:
            job = await tx.insert({}, kind="k", queue="q")  # (above READ COMMITTED: no seat)
            # A pause committed before this transaction does: the job is not claimed.
            with psycopg.connect(db.info.dsn, autocommit=True) as other:
                other.execute(
                    "INSERT INTO awa.queue_meta (queue, paused) VALUES ('q', true) "
                    "ON CONFLICT (queue) DO UPDATE SET paused = true"
                )
        assert (await client.get_job(job.id)).state is awa.JobState.AVAILABLE
        await _parked(db, 0)  # the worker saw the pause and took its seats back
        await client.resume_queue("q")
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id]
    finally:
        await client.shutdown()


async def test_an_insert_taking_a_seat_does_not_wait_for_an_uncommitted_pause(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Migration 0037: the claim at the insert's commit tries the pause gate. It waited
    for it, so a pause left open in an operator's transaction stalled every producer's
    insert into the queue (a review); the job now waits for the usual claim instead, and
    runs when the pause rolls back."""
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        with psycopg.connect(db.info.dsn) as operator:
            operator.execute(
                "INSERT INTO awa.queue_meta (queue, paused) VALUES ('q', true) "
                "ON CONFLICT (queue) DO UPDATE SET paused = true"
            )
            job = await asyncio.wait_for(client.insert({}, kind="k", queue="q"), timeout=15)
            assert (await client.get_job(job.id)).state is awa.JobState.AVAILABLE
            operator.rollback()
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id]
    finally:
        await client.shutdown()


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
async def test_a_pause_committed_first_wins_over_a_seat_taken_in_a_snapshot_transaction(
    client: awa.AsyncClient, db: psycopg.Connection[Any], isolation: str
) -> None:
    """The claim at commit read the producer's snapshot, older than the pause: the job
    ran on the paused queue (a review). And taking a seat an idle worker renewed since the
    snapshot failed to serialize, and the application's transaction with it (a review).
    Such a transaction's job takes no seat: it is claimed the usual way."""
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        async with client.transaction() as tx:
            await tx.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
            await tx.execute("SELECT 1")  # the snapshot is taken here
            db.execute("UPDATE awa.handoff_seats SET expires_at = expires_at")  # a renewal
            job = await tx.insert({}, kind="k", queue="q")  # (above READ COMMITTED: no seat)
            with psycopg.connect(db.info.dsn, autocommit=True) as other:
                other.execute(
                    "INSERT INTO awa.queue_meta (queue, paused) VALUES ('q', true) "
                    "ON CONFLICT (queue) DO UPDATE SET paused = true"
                )
        assert (await client.get_job(job.id)).state is awa.JobState.AVAILABLE
        await client.resume_queue("q")
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id]
    finally:
        await client.shutdown()


@pytest.mark.parametrize("case", ["fleet_limited", "rate_limited", "off"])
async def test_no_seats_for_a_limited_queue_or_when_off(
    client: awa.AsyncClient, db: psycopg.Connection[Any], case: str
) -> None:
    ran: list[int] = []
    if case == "fleet_limited":
        await client.set_queue_limits("q", concurrency=4)
    if case == "rate_limited":
        await _start(client, ran, queue={"name": "q", "max_workers": 8, "rate_limit": (1e6, 0)})
    else:
        await _start(client, ran, **({"handoff_seats": 0} if case == "off" else {}))
    try:
        job = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id]
        assert _seats(db) == 0 and _worker(client).dispatchers["q"].handoffs == 0
    finally:
        await client.shutdown()


async def test_a_job_too_large_for_a_notice_is_claimed_the_usual_way(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        job = await client.insert({"blob": "x" * 10_000}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id] and _worker(client).dispatchers["q"].handoffs == 0
        await _parked(db, 4)  # the seat it took came back as a permit and was parked again
    finally:
        await client.shutdown()


async def test_a_lapsed_seat_is_not_taken(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A dead worker's seats lapse: an insert then wakes the live workers instead."""
    db.execute(
        "INSERT INTO awa.handoff_seats (queue, channel, expires_at) "
        "VALUES ('q', 'awa_handoff_dead', now() - interval '1 second')"
    )
    job = await client.insert({}, kind="k", queue="q")
    row = db.execute("SELECT state, job_id FROM awa.jobs, awa.handoff_seats WHERE id = %s",
                     (job.id,)).fetchone()  # fmt: skip
    assert row == ("available", None)


async def test_a_seat_whose_listener_is_gone_is_not_taken(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A worker killed leaves its seats until they lapse; its LISTEN connection's server
    process ends with it, and producers skip such seats: the job stays available for the
    live workers instead of waiting for a rescue and losing an attempt."""
    with psycopg.connect(database_url) as gone:
        dead_pid = gone.info.backend_pid

    async def ended() -> bool:
        query = "SELECT pid FROM pg_stat_get_activity(%s)"
        return db.execute(query, (dead_pid,)).fetchone() is None

    await wait_for(ended)
    db.execute(
        "INSERT INTO awa.handoff_seats (queue, channel, expires_at, listener_pid) "
        "VALUES ('q', 'awa_handoff_dead', now() + interval '1 minute', %s)",
        (dead_pid,),
    )
    job = await client.insert({}, kind="k", queue="q")
    row = db.execute("SELECT state, attempt FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
    assert row == ("available", 0)
    assert _untaken(db) == 1
    # A live worker's seats name its listener, and are taken.
    ran: list[int] = []
    db.execute("DELETE FROM awa.handoff_seats")
    await _start(client, ran)
    try:
        await _parked(db, 4)
        pids = db.execute("SELECT DISTINCT listener_pid FROM awa.handoff_seats").fetchall()
        assert pids == [(_worker(client).listener.backend_pid,)]
        handed = await client.insert({}, kind="k", queue="q")
        await wait_for(lambda: _completed(client, handed.id))
        assert handed.id in ran
    finally:
        await client.shutdown()


async def test_a_small_queue_keeps_a_permit_out_of_its_seats(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """With max_workers 2, one seat at most: a job made available another way (a bulk
    insert) is still claimed, and the queue turning busy takes its seat back."""
    ran: list[int] = []
    await _start(client, ran, workers=2)
    try:
        await _parked(db, 1)
        ids = await client.insert_many([{"i": i} for i in range(5)], kind="k", queue="q")
        await wait_for(lambda: _all_completed(client, [j.id for j in ids]))
        assert sorted(ran) == sorted(j.id for j in ids)
    finally:
        await client.shutdown()


async def _all_completed(client: awa.AsyncClient, ids: list[int]) -> bool:
    for job_id in ids:
        if (await client.get_job(job_id)).state is not awa.JobState.COMPLETED:
            return False
    return True


async def test_a_job_handed_to_a_worker_that_died_is_rescued(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A seat outlives its worker until it lapses: a job claimed for it then runs nowhere
    until its heartbeat is stale, and the rescuer returns it (never lost) with its attempt
    given back: it never ran."""
    db.execute(
        "INSERT INTO awa.handoff_seats (queue, channel, expires_at) "
        "VALUES ('q', 'awa_handoff_dead', now() + interval '1 minute')"
    )
    job = await client.insert({}, kind="k", queue="q")
    row = db.execute("SELECT state, attempt FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()
    assert row == ("running", 1)  # claimed at commit for the dead worker
    ran: list[int] = []
    await _start(client, ran, handoff_seats=0)
    try:
        done = await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id] and done.attempt == 1
        assert done.errors[-1]["type"] == "NeverHeartbeated"
    finally:
        await client.shutdown()


async def test_a_failed_round_gives_back_the_permits_it_set_aside(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A round that must take one queue's seats back and park another's fails on the
    first statement: the permits set aside for the new seats go back, and both queues are
    seen to again, so every permit ends parked or free — none lost."""

    @client.task(None, kind="k", queue="q")
    async def handler(job: awa.Job[Any]) -> None:
        return None

    await client.start([("q", 8), ("r", 8)], **FAST_WORKER)
    try:
        await _parked(db, 4, "q")
        await _parked(db, 4, "r")
        seater = _worker(client).seater

        async def seater_knows_them() -> bool:  # the rows commit before the seater records them
            return sum(s.queue in ("q", "r") for s in seater.seats.values()) == 8

        await wait_for(seater_knows_them)
        real_release, failures = seater._release, []

        async def failing_release(seat_ids: list[int]) -> None:
            if not failures:
                failures.append(seat_ids)
                raise RuntimeError("the database went away")
            await real_release(seat_ids)

        seater._release = failing_release
        r_seat = next(i for i, s in seater.seats.items() if s.queue == "r")
        db.execute("DELETE FROM awa.handoff_seats WHERE seat_id = %s", (r_seat,))
        seater.refresh("q")  # q's seats must come back first …
        seater.on_notice(json.dumps({"seat": r_seat}))  # … and r has a seat to re-park
        await _parked(db, 4, "r")
        await _parked(db, 4, "q")
        assert failures  # the round did fail once
        for queue in ("q", "r"):
            permits = _worker(client).dispatchers[queue].permits
            assert permits.available == 8 - 4  # four parked, the rest free: nothing leaked
    finally:
        await client.shutdown()


async def test_a_forged_notice_on_a_workers_channel_runs_nothing(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Anyone may NOTIFY: a notice naming a seat the worker did not park — here with a
    running job's real lease, as a forger reading the jobs table could copy — is refused,
    neither run nor given back; the worker's own handoffs go on."""
    ran: list[int] = []
    await _start(client, ran)
    try:
        await _parked(db, 4)
        victim = await client.insert({"x": 0}, kind="other", queue="elsewhere")
        db.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
            "attempted_at = now(), heartbeat_at = now() WHERE id = %s", (victim.id,),
        )  # fmt: skip
        row = db.execute(
            "SELECT (SELECT channel FROM awa.handoff_seats LIMIT 1), "
            "(SELECT max(seat_id) + 1000 FROM awa.handoff_seats), "
            "row_to_json(j) FROM awa.jobs AS j WHERE j.id = %s", (victim.id,),
        ).fetchone()  # fmt: skip
        assert row is not None
        channel, unknown_seat, stolen = row
        forged = {**stolen, "kind": "k", "queue": "q", "args": {"forged": True}}
        db.execute("SELECT pg_notify(%s, %s)", (channel, json.dumps({"seat": unknown_seat,
                                                                     "job": forged})))  # fmt: skip
        job = await client.insert({"x": 1}, kind="k", queue="q")  # notified after the forgery
        await wait_for(lambda: _completed(client, job.id))
        assert ran == [job.id]
        assert (await client.get_job(victim.id)).state is awa.JobState.RUNNING  # untouched
    finally:
        await client.shutdown()
