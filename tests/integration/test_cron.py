"""Periodic jobs on real PostgreSQL: firing, DST, exactly-once under races, admin, CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

import awa
from awa.cli.main import main as cli
from awa.maintenance.cron import CronService, register
from tests.helpers import FAST_WORKER, lead_maintenance, noop_task, skewed_datetime, wait_for

CRON_FAST = {**FAST_WORKER, "cron_interval_ms": 50}


def _fires(db: psycopg.Connection[Any], name: str) -> list[datetime]:
    rows = db.execute(
        "SELECT (metadata->>'cron_fire_at')::timestamptz FROM awa.jobs "
        "WHERE metadata->>'cron_name' = %s ORDER BY id",
        (name,),
    ).fetchall()
    return [row[0] for row in rows]


async def _count_fires(db: psycopg.Connection[Any], name: str, n: int) -> bool:
    return len(_fires(db, name)) >= n


async def test_a_schedule_fires_on_the_leader_and_its_jobs_run(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []

    @client.task(None, kind="tick", queue="q")
    async def tick(job: awa.Job[Any]) -> None:
        ran.append(job.id)

    client.periodic("every-second", "* * * * * *", {"n": 1}, kind="tick", queue="q",
                    tags=["cron"], metadata={"source": "test"})  # fmt: skip
    await client.start([("q", 2)], **CRON_FAST)
    try:
        await wait_for(lambda: _count_fires(db, "every-second", 2))

        async def ran_two() -> bool:
            return len(ran) >= 2

        await wait_for(ran_two)
    finally:
        await client.shutdown()
    job = await client.get_job(ran[0])
    assert job.kind == "tick" and job.args == {"n": 1} and job.tags == ["cron"]
    assert job.metadata["source"] == "test" and job.metadata["cron_name"] == "every-second"
    fires = _fires(db, "every-second")
    assert len(set(fires)) == len(fires)  # never the same fire twice
    (schedule,) = await client.list_cron_schedules()
    assert schedule.name == "every-second" and schedule.last_fire_at == max(fires)
    assert schedule.next_fire_at is not None and schedule.next_fire_at > schedule.last_fire_at


async def _define(
    client: awa.AsyncClient, db: psycopg.Connection[Any], created_at: datetime, *defs: Any
) -> None:
    await register(await client._get_pool(), list(defs))
    db.execute("UPDATE awa.cron_schedules SET created_at = %s", (created_at,))


def _lead(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return lead_maintenance(conn)


def _walk(client: awa.AsyncClient, start: datetime, step: timedelta, steps: int) -> Any:
    async def run() -> list[datetime]:
        clock = [start]
        service = CronService(await client._get_pool(), clock=lambda: clock[0])
        epoch = await asyncio.to_thread(_lead, client.database_url)
        for _ in range(steps):
            clock[0] += step
            await service.tick(epoch)
        return clock

    return run()


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        # Spring forward (02:00 → 03:00): 02:30 does not exist; it fires once, at 03:30.
        (datetime(2024, 3, 9, 12, tzinfo=UTC),
         ["2024-03-10 01:30-0500", "2024-03-10 03:30-0400",
          "2024-03-11 01:30-0400", "2024-03-11 02:30-0400"]),
        # Fall back (02:00 → 01:00): 01:30 happens twice; a daily job fires once, the first.
        (datetime(2024, 11, 2, 12, tzinfo=UTC),
         ["2024-11-03 01:30-0400", "2024-11-03 02:30-0500",
          "2024-11-04 01:30-0500", "2024-11-04 02:30-0500"]),
    ],
    ids=["spring-forward", "fall-back"],
)  # fmt: skip
async def test_daily_schedules_across_a_dst_change(
    client: awa.AsyncClient, db: psycopg.Connection[Any], day: datetime, expected: list[str]
) -> None:
    ny = "America/New_York"
    await _define(
        client,
        db,
        day,
        client.periodic("at-0130", "30 1 * * *", {}, kind="k", timezone=ny,
                        missed_fire_policy="catch_up"),
        client.periodic("at-0230", "30 2 * * *", {}, kind="k", timezone=ny,
                        missed_fire_policy="catch_up"),
    )  # fmt: skip
    await _walk(client, day, timedelta(minutes=10), 6 * 48)  # two days in 10-minute ticks
    fires = sorted(_fires(db, "at-0130") + _fires(db, "at-0230"))
    assert [f.astimezone(ZoneInfo(ny)).strftime("%Y-%m-%d %H:%M%z") for f in fires] == expected


async def test_hourly_schedule_fires_in_both_repeated_hours_at_fall_back(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    start = datetime(2024, 11, 3, 3, 50, tzinfo=UTC)  # 23:50 EDT on the 2nd
    await _define(client, db, start, client.periodic("hourly", "0 * * * *", {}, kind="k",
                  timezone="America/New_York", missed_fire_policy="catch_up"))  # fmt: skip
    await _walk(client, start, timedelta(minutes=5), 12 * 5)  # five hours
    fires = _fires(db, "hourly")
    gaps = {b - a for a, b in itertools.pairwise(fires)}
    assert len(fires) == 5 and gaps == {timedelta(hours=1)}  # 00, 01 EDT, 01 EST, 02, 03


async def test_two_processes_racing_on_a_schedule_enqueue_each_fire_once(
    client: awa.AsyncClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    await _define(client, db, start, client.periodic("race", "*/10 * * * * *", {}, kind="k",
                                                     missed_fire_policy="catch_up"))  # fmt: skip
    async with awa.AsyncClient(database_url) as other:
        clock = [start]
        mine = CronService(await client._get_pool(), clock=lambda: clock[0])
        theirs = CronService(await other._get_pool(), clock=lambda: clock[0])
        epoch = lead_maintenance(db)  # both believe they lead (a failover, a stalled leader)
        for _ in range(30):
            clock[0] += timedelta(seconds=7)
            await asyncio.gather(mine.tick(epoch), theirs.tick(epoch), mine.tick(epoch))
    fires = _fires(db, "race")
    expected = [start + timedelta(seconds=10 * i) for i in range(1, 22)]  # 210 s / 10 s
    assert fires == expected
    assert mine.fired + theirs.fired == len(expected) and mine.fired and theirs.fired >= 0


async def test_coalesce_enqueues_every_fire_that_came_due_between_two_ticks(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """Ticks are about a second apart plus their own time, so a tick may find two fires
    of a per-second schedule due: coalescing them lost a fire every few dozen, with one
    healthy leader (a review). Only a new leader's first tick folds what it never saw."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    await _define(client, db, start, client.periodic("sec", "* * * * * *", {}, kind="k"))
    clock = [start + timedelta(seconds=3, milliseconds=500)]  # a leader starting late
    service = CronService(await client._get_pool(), clock=lambda: clock[0])
    epoch = await asyncio.to_thread(_lead, client.database_url)
    await service.tick(epoch)  # its first tick: the three missed fires folded into one
    for step_ms in itertools.islice(itertools.cycle([1_700, 400, 1_900, 1_000, 1_300]), 20):
        clock[0] += timedelta(milliseconds=step_ms)
        await service.tick(epoch)
    last = clock[0].replace(microsecond=0)
    seconds = int((last - start).total_seconds())
    assert _fires(db, "sec") == [start + timedelta(seconds=s) for s in range(3, seconds + 1)]


async def test_coalesce_folds_what_came_due_while_the_leader_stalled(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A leader that did not tick for a while (a blocked loop, a lock held on the
    schedules) under the same lease was there for none of those fires: coalesce folds
    them into the latest, as after downtime (a review: 11 jobs in one second)."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    await _define(client, db, start, client.periodic("sec", "* * * * * *", {}, kind="k"))
    clock = [start + timedelta(milliseconds=1_100)]
    service = CronService(await client._get_pool(), clock=lambda: clock[0], interval_s=1.0)
    epoch = await asyncio.to_thread(_lead, client.database_url)
    await service.tick(epoch)  # fires 1 s
    clock[0] += timedelta(seconds=1)
    await service.tick(epoch)  # fires 2 s
    clock[0] += timedelta(seconds=10)  # stalled: 3 s to 12 s came due with no tick there
    await service.tick(epoch)
    assert _fires(db, "sec") == [start + timedelta(seconds=s) for s in (1, 2, 12)]


async def test_a_slow_tick_is_no_stall(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A tick that took long (many schedules, a wait for a connection) is no stall: the
    next one, a tick after it ended, enqueues every fire that came due."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    await _define(client, db, start, client.periodic("sec", "* * * * * *", {}, kind="k"))
    # Each tick reads the clock as it starts and as it ends: the first takes 2.7 s.
    times = iter([1.1, 3.8, 4.9, 4.9])
    service = CronService(
        await client._get_pool(),
        clock=lambda: start + timedelta(seconds=next(times)),
        interval_s=1.0,
    )
    epoch = await asyncio.to_thread(_lead, client.database_url)
    await service.tick(epoch)  # fires 1 s (coalesced: its first tick)
    await service.tick(epoch)  # 3.8 s after the last start, 1.1 s after the last end
    assert _fires(db, "sec") == [start + timedelta(seconds=s) for s in (1, 2, 3, 4)]


async def test_a_tick_finding_more_fires_than_a_statement_holds_loses_none(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A tick blocked 110 s (a lock on the schedule's row): the next found 111 fires due,
    enqueued 100, and the tick after it went on from its own start — 11 fires lost, with
    the leader up all along (a review)."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    await _define(client, db, start, client.periodic("sec", "* * * * * *", {}, kind="k"))
    # Each tick reads the clock as it starts and as it ends: the first is blocked 111 s.
    times = iter([1.1, 112.0, 113.0, 113.0, 114.5, 114.5])
    service = CronService(
        await client._get_pool(),
        clock=lambda: start + timedelta(seconds=next(times)),
        interval_s=1.0,
    )
    epoch = await asyncio.to_thread(_lead, client.database_url)
    for _ in range(3):
        await service.tick(epoch)
    assert _fires(db, "sec") == [start + timedelta(seconds=s) for s in range(1, 115)]


async def test_a_schedule_whose_writes_fail_holds_back_no_other_and_loses_none(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """One schedule's refused insert aborted the tick: the schedules after it got nothing,
    and failed ticks in a row read as a stall whose coalesce lost every one's fires (a
    review)."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    await _define(client, db, start, client.periodic("a_bad", "* * * * * *", {}, kind="a"),
                  client.periodic("b_good", "* * * * * *", {}, kind="b"))  # fmt: skip
    db.execute(  # test-only: a trigger refusing kind a while asked to
        "CREATE TABLE refuse (on_ boolean); INSERT INTO refuse VALUES (false);"
        "CREATE FUNCTION refuse_a() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.kind = 'a' AND (SELECT on_ FROM refuse) THEN RAISE 'refused'; END IF; "
        "RETURN NEW; END $$;"
        "CREATE TRIGGER refuse_a BEFORE INSERT ON awa.jobs FOR EACH ROW EXECUTE FUNCTION refuse_a()"
    )
    clock = [start + timedelta(milliseconds=1_100)]
    service = CronService(await client._get_pool(), clock=lambda: clock[0], interval_s=1.0)
    epoch = await asyncio.to_thread(_lead, client.database_url)
    await service.tick(epoch)  # fires 1 s of both
    db.execute("UPDATE refuse SET on_ = true")
    for _ in range(4):  # 2 s … 5 s: a refused, b goes on
        clock[0] += timedelta(seconds=1)
        await service.tick(epoch)
    db.execute("UPDATE refuse SET on_ = false")
    clock[0] += timedelta(seconds=1)
    await service.tick(epoch)  # 6 s, and a's owed fires
    every = [start + timedelta(seconds=s) for s in range(1, 7)]
    assert sorted(_fires(db, "b_good")) == every
    assert sorted(_fires(db, "a_bad")) == every


async def test_leader_failover_neither_skips_nor_repeats_a_fire(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    first = awa.AsyncClient(database_url)
    second = awa.AsyncClient(database_url)
    try:
        for c in (first, second):
            noop_task(c, queue="unused")
            c.periodic("failover", "* * * * * *", {}, kind="k", queue="idle",
                       missed_fire_policy="catch_up")  # fmt: skip
        await first.start([("unused", 1)], **CRON_FAST)
        await second.start([("unused", 1)], **CRON_FAST)
        await wait_for(lambda: _count_fires(db, "failover", 2))
        leader, follower = (first, second) if (await first.health_check()).leader else (
            second, first)  # fmt: skip
        await leader.shutdown()  # the lock goes with its connection
        before = len(_fires(db, "failover"))
        await wait_for(lambda: _count_fires(db, "failover", before + 2))
        assert (await follower.health_check()).leader
    finally:
        await first.close()
        await second.close()
    fires = _fires(db, "failover")
    assert len(set(fires)) == len(fires)
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(fires))


async def test_coalesce_enqueues_one_job_after_downtime_catch_up_one_per_miss(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    start = datetime(2024, 6, 1, tzinfo=UTC)
    await _define(
        client,
        db,
        start,
        client.periodic("co", "*/5 * * * *", {}, kind="k"),
        client.periodic("cu", "*/5 * * * *", {}, kind="k", missed_fire_policy="catch_up"),
    )
    await _walk(client, start, timedelta(minutes=60), 1)  # one tick after an hour down
    assert _fires(db, "co") == [start + timedelta(minutes=60)]
    assert _fires(db, "cu") == [start + timedelta(minutes=5 * i) for i in range(1, 13)]


_HostAhead = skewed_datetime(timedelta(seconds=90))  # a host 90 s ahead of the database


async def test_fires_are_reckoned_by_the_databases_clock_not_the_leaders(
    client: awa.AsyncClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader whose clock ran ahead enqueued fires before their time, and one behind
    skipped fires (a review of skewed hosts); ``awa cron list`` showed the next fire by
    the reading host's clock."""
    import awa.maintenance.cron
    import awa.periodic

    for module in (awa.maintenance.cron, awa.periodic):
        monkeypatch.setattr(module, "datetime", _HostAhead, raising=False)
    start = datetime.now(UTC) - timedelta(minutes=2)
    await _define(client, db, start, client.periodic("every20", "*/20 * * * * *", {}, kind="k"))
    assert await CronService(await client._get_pool()).tick(lead_maintenance(db)) == 1
    (fired,) = _fires(db, "every20")
    db_now = db.execute("SELECT now()").fetchone()[0]
    assert fired <= db_now  # coalesced to the last fire due by the database's clock
    (schedule,) = await client.list_cron_schedules()
    listed_at = db.execute("SELECT now()").fetchone()[0]
    assert schedule.next_fire_at is not None  # the next on the database's clock, not 90 s on
    assert timedelta(0) < schedule.next_fire_at - listed_at <= timedelta(seconds=20)


async def test_pause_resume_trigger_remove(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    start = datetime.now(UTC) - timedelta(hours=2)
    await _define(client, db, start, client.periodic("ops", "0 * * * *", {"a": 1}, kind="k"))
    paused = await client.pause_cron("ops")
    assert paused.paused and paused.next_fire_at is None
    service = CronService(await client._get_pool())
    epoch = lead_maintenance(db)
    assert await service.tick(epoch) == 0  # paused: nothing fires
    resumed = await client.resume_cron("ops")
    assert not resumed.paused and resumed.last_fire_at is not None
    assert await service.tick(epoch) == 0  # fires missed while paused are skipped
    job = await client.trigger_cron("ops")
    assert job.kind == "k" and job.args == {"a": 1} and job.metadata["cron_name"] == "ops"
    assert (await client.list_cron_schedules())[0].last_fire_at == resumed.last_fire_at
    await client.remove_cron("ops")
    assert await client.list_cron_schedules() == []
    for action in (client.pause_cron, client.resume_cron, client.trigger_cron, client.remove_cron):
        with pytest.raises(awa.ScheduleNotFound, match="ops"):
            await action("ops")


async def test_triggering_a_schedule_only_registered_says_start_stores_it(
    client: awa.AsyncClient,
) -> None:
    """A unit test that registers a schedule and triggers it, no worker started (a review:
    the error said only "see `awa cron list`")."""
    client.periodic("nightly", "0 3 * * *", {}, kind="k")
    with pytest.raises(awa.ScheduleNotFound, match=r"stored by start\(\)"):
        await client.trigger_cron("nightly")
    with pytest.raises(awa.ScheduleNotFound, match="awa cron list"):
        await client.trigger_cron("unknown")


async def test_registration_validates_every_field(client: awa.AsyncClient) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("cron_expr", {"cron_expr": "* * *"}),
        ("cron_expr", {"cron_expr": "61 * * * *"}),
        ("timezone", {"timezone": "Mars/Olympus"}),
        ("missed_fire_policy", {"missed_fire_policy": "sometimes"}),
        ("priority", {"priority": 9}),
        ("name", {"name": ""}),
        ("kind", {"kind": None}),
    ]
    for field, override in cases:
        params: dict[str, Any] = {"name": "n", "cron_expr": "* * * * *", "kind": "k", **override}
        with pytest.raises(awa.ValidationError) as info:
            client.periodic(params.pop("name"), params.pop("cron_expr"), {}, **params)
        assert info.value.field == field
    client.periodic("dup", "@daily", {}, kind="k")
    with pytest.raises(awa.ValidationError, match="already registered"):
        client.periodic("dup", "@hourly", {}, kind="k")


def test_cron_cli(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with awa.Client(database_url) as client:
        client.periodic("nightly", "0 3 * * *", {}, kind="k", timezone="Europe/Paris")
        noop_task(client)
        client.start([("q", 1)], **CRON_FAST)
        client.shutdown()
    base = ["--database-url", database_url, "cron"]
    assert cli([*base, "list", "--json"]) == 0
    assert '"name": "nightly"' in capsys.readouterr().out
    assert cli([*base, "pause", "nightly"]) == 0
    assert cli([*base, "list", "--json"]) == 0
    assert '"paused": true' in capsys.readouterr().out
    assert cli([*base, "resume", "nightly", "--json"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["name"] == "nightly" and resumed["paused"] is False
    assert cli([*base, "trigger", "nightly"]) == 0
    assert "enqueued job" in capsys.readouterr().out
    assert cli([*base, "trigger", "nightly", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "k"
    assert cli([*base, "remove", "nightly", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"removed": "nightly"}
    assert cli([*base, "trigger", "nightly"]) == 1
    assert "not found" in capsys.readouterr().err


async def test_a_new_expression_starts_its_timetable_at_the_deploy(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A yearly schedule redeployed as every 5 minutes: nothing for the two days the
    yearly one was in force (before: 100 jobs a tick until 576 were caught up)."""
    made = datetime.now(UTC) - timedelta(days=2)
    await _define(client, db, made, client.periodic("rep", "0 0 1 1 *", {}, kind="k",
                                                    missed_fire_policy="catch_up"))  # fmt: skip
    same = awa.AsyncClient(client.database_url)  # a redeploy, definition unchanged
    await register(await client._get_pool(), [same.periodic(
        "rep", "0 0 1 1 *", {}, kind="k", missed_fire_policy="catch_up")])  # fmt: skip
    (kept,) = await client.list_cron_schedules()
    assert kept.last_fire_at is None  # unchanged: its timetable goes on
    deployed = datetime.now(UTC)
    v2 = awa.AsyncClient(client.database_url)
    await register(await client._get_pool(), [v2.periodic(
        "rep", "*/5 * * * *", {}, kind="k", missed_fire_policy="catch_up")])  # fmt: skip
    (changed,) = await client.list_cron_schedules()
    assert changed.last_fire_at is not None and changed.last_fire_at >= deployed
    service = CronService(await client._get_pool(), clock=lambda: changed.last_fire_at)
    assert await service.tick(lead_maintenance(db)) == 0
    assert _fires(db, "rep") == []
    # Any writer, not only this release's upsert: an older pod's, a hand-written UPDATE.
    db.execute("UPDATE awa.cron_schedules SET last_fire_at = now() - interval '6 hours'")
    before = datetime.now(UTC)
    db.execute("UPDATE awa.cron_schedules SET cron_expr = '* * * * *' WHERE name = 'rep'")
    (rolled,) = await client.list_cron_schedules()
    assert rolled.last_fire_at is not None and rolled.last_fire_at >= before - timedelta(seconds=1)
    db.execute("UPDATE awa.cron_schedules SET args = '{\"x\": 1}'")  # not the timetable
    (same,) = await client.list_cron_schedules()
    assert same.last_fire_at == rolled.last_fire_at


async def test_cli_tables_show_times_in_utc(
    client: awa.AsyncClient, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Last fire came back in the session's time zone, next fire in UTC, offsets dropped:
    the next fire read as earlier than the last (a review)."""
    await register(await client._get_pool(), [client.periodic("hourly", "0 * * * *", {},
                                                              kind="k")])  # fmt: skip
    # Long past: shown in Tokyo's time it could not be mistaken for the next fire (with
    # the last fire a day ago, the check failed during one hour of a day).
    db.execute("UPDATE awa.cron_schedules SET last_fire_at = '2020-01-01 18:00:00+00'")
    (name,) = db.execute("SELECT current_database()").fetchall()[0]
    db.execute(f"ALTER DATABASE \"{name}\" SET timezone = 'Asia/Tokyo'")  # test-only name
    try:
        args = ["--database-url", client.database_url, "cron", "list"]
        assert await asyncio.to_thread(cli, args) == 0
    finally:
        db.execute(f'ALTER DATABASE "{name}" RESET timezone')
    out = capsys.readouterr().out
    assert "2020-01-01 18:00:00" in out and "2020-01-02 03:00:00" not in out


@dataclasses.dataclass
class Place:
    city: str


class Colour(enum.Enum):
    RED = "red"


async def test_dict_args_holding_dataclasses_and_enums_are_stored_as_an_insert_stores_them(
    client: awa.AsyncClient,
) -> None:
    noop_task(client, kind="report")
    client.periodic("nightly", "0 3 * * *", {"to": Place("Oslo"), "c": Colour.RED},
                    kind="report", queue="q", metadata={"by": Colour.RED})  # fmt: skip
    await client.start([("q", 1)], **CRON_FAST)  # stored the definitions: once a TypeError
    await client.shutdown()
    (schedule,) = await client.list_cron_schedules()
    assert schedule.args == {"to": {"city": "Oslo"}, "c": "red"}
    assert schedule.metadata == {"by": "red"}


async def test_a_definition_replacing_another_is_logged(
    client: awa.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Two services registering one name take the schedule from each other at each start:
    the one replaced went on believing it fired (a review). The replacement is logged."""
    pool = await client._get_pool()
    billing = client.periodic("cleanup", "* * * * *", {}, kind="billing_cleanup")
    other_service = awa.AsyncClient(client.database_url)  # registers only: never connects
    mail = other_service.periodic("cleanup", "*/2 * * * *", {}, kind="mail_cleanup", queue="mail")
    redeployed = awa.AsyncClient(client.database_url).periodic(  # the next deploy's
        "cleanup", "* * * * *", {"limit": 200}, kind="billing_cleanup", tags=["t"]
    )

    def redefined() -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "event", None) == "cron_redefined"]

    with caplog.at_level("INFO", logger="awa"):
        await register(pool, [billing])
        await register(pool, [billing])  # the same definition again: nothing to say
        assert not redefined()
        await register(pool, [redeployed])  # new args and tags: a redeploy, said quietly
        [quiet] = redefined()
        assert quiet.levelname == "INFO" and quiet.changed == ["args", "tags"]
        await register(pool, [mail])
    record = redefined()[-1]
    assert record.levelname == "WARNING"
    message = record.getMessage()
    assert "'cleanup'" in message and "'billing_cleanup'" in message
    assert "'mail_cleanup' on queue 'mail'" in message
    (schedule,) = await client.list_cron_schedules()
    assert schedule.kind == "mail_cleanup"
