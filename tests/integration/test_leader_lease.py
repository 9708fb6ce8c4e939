"""The maintenance lease (ADR 0019): every maintenance statement is fenced by the epoch
its leader was elected with, and a fenced statement holds off a takeover until it
commits, without holding off its own leader's renewals."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors

import awa
from awa.config import QueueConfig
from awa.db import sql
from awa.maintenance import aging, callbacks, promoter, pruner, rescuer
from awa.maintenance.cron import CronService, register
from tests.helpers import lead_maintenance
from tests.integration.test_bad_input import awa_snapshot

Maintenance = Callable[[Any, int], Awaitable[object]]
OLD = "now() - interval '40 days'"


async def _seed(client: awa.AsyncClient, db: psycopg.Connection[Any]) -> None:
    """One row for every maintenance statement to act on."""
    ids = [j.id for j in await client.insert_many([{}] * 8, kind="k", queue="q")]
    db.execute("INSERT INTO awa.queue_meta (queue, dlq) VALUES ('q', true)")
    for job_id, change in zip(ids, [
        "state = 'scheduled', run_at = now() - interval '1 s'",  # promotion
        "state = 'running', attempt = 1, heartbeat_at = " + OLD,  # heartbeat rescue
        "state = 'running', attempt = 1, heartbeat_at = now(), deadline_at = " + OLD,
        "state = 'waiting_external', callback_timeout_at = " + OLD,  # callback timeout
        "state = 'completed', finalized_at = " + OLD,  # retention
        "run_at = " + OLD,  # priority aging
        "state = 'failed', finalized_at = now()",  # dead-lettered...
    ], strict=False):  # fmt: skip
        db.execute(f"UPDATE awa.jobs SET {change} WHERE id = %s", (job_id,))
    db.execute(f"UPDATE awa.dlq SET dlq_at = {OLD}")  # ...long ago
    db.execute(  # a batch operation that ended long ago
        "INSERT INTO awa.batch_operations (op, spec, filter, state, chunk_size, finalized_at)"
        f" VALUES ('set_priority', '{{\"priority\": 1}}', '{{}}', 'completed', 10, {OLD})"
    )
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at, "
        f"last_seen_at) VALUES (gen_random_uuid(), 'h', 1, {OLD}, {OLD})"
    )
    start = datetime.now(UTC) - timedelta(hours=1)
    await register(await client._get_pool(), [client.periodic("c", "* * * * *", {}, kind="k")])
    db.execute("UPDATE awa.cron_schedules SET created_at = %s", (start,))


def _services(client: awa.AsyncClient, pool: Any) -> dict[str, Maintenance]:
    day = 24 * 3_600_000
    cron = CronService(pool)
    return {
        "promote": lambda p, e: promoter.promote_due(p, e),
        "rescue heartbeat": lambda p, e: rescuer.rescue_stale_heartbeats(p, 60_000, e),
        "rescue deadline": lambda p, e: rescuer.rescue_past_deadline(p, 1_000, e),
        "callback timeout": lambda p, e: callbacks.rescue_callback_timeouts(p, e),
        "aging": lambda p, e: aging.age_priorities(
            p, aging.aging_queues([QueueConfig("q", priority_aging_interval_ms=1_000)]), e
        ),
        "prune jobs": lambda p, e: pruner.prune_finalized(p, day, 30 * day, e),
        "prune instances": lambda p, e: pruner.prune_runtime_instances(p, e),
        "prune dlq": lambda p, e: pruner.prune_dlq(p, day, e),
        "prune batches": lambda p, e: pruner.prune_ended_batches(p, day, e),
        "cron": lambda _, e: cron.tick(e),
    }


async def test_every_maintenance_statement_is_fenced_by_the_lease_epoch(
    client: awa.AsyncClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    await _seed(client, db)
    pool = await client._get_pool()
    services = _services(client, pool)
    stale = lead_maintenance(db, holder="former")
    db.execute("UPDATE awa.leader_lease SET expires_at = now()")  # "former" stopped renewing
    current = lead_maintenance(db, holder="current")  # took over: the epoch moved on
    assert current > stale
    before = awa_snapshot(database_url)
    for name, service in services.items():
        await service(pool, stale)
        assert awa_snapshot(database_url) == before, f"{name} acted under a stale epoch"
    changed = []
    for name, service in services.items():
        await service(pool, current)
        after = awa_snapshot(database_url)
        if after != before:
            changed.append(name)
        before = after
    assert changed == list(services)  # each acts under the current epoch


async def test_an_expired_lease_fences_its_own_epoch(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A leader past its lease acts no more, even before anyone else takes over."""
    job = await client.insert({}, kind="k", run_at=datetime.now(UTC) + timedelta(hours=1))
    db.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (job.id,))
    epoch = lead_maintenance(db)
    db.execute("UPDATE awa.leader_lease SET expires_at = now() - interval '1 s'")
    assert await promoter.promote_due(await client._get_pool(), epoch) == 0
    db.execute("UPDATE awa.leader_lease SET expires_at = now() + interval '1 hour'")
    assert await promoter.promote_due(await client._get_pool(), epoch) == 1


def test_a_fenced_statement_holds_off_a_takeover_but_not_a_renewal(database_url: str) -> None:
    """Epoch is a key: a running fenced statement (FOR KEY SHARE on the lease row) makes a
    takeover (which changes the epoch) wait until it commits, so a former leader's last
    write always lands before the new leader's first; the leader's own renewal (which
    changes only expires_at) does not wait."""
    with (
        psycopg.connect(database_url, autocommit=True) as leader,
        psycopg.connect(database_url) as statement,
        psycopg.connect(database_url, autocommit=True) as other,
    ):
        epoch = lead_maintenance(leader, holder="leader")
        row = statement.execute("SELECT awa.leader_holds(%s)", (epoch,)).fetchone()
        assert row == (True,)  # ...and the transaction stays open, as a long statement would
        renewed = leader.execute(
            sql.LEADER_LEASE_RENEW,
            {"epoch": epoch, "holder": "leader", "lease_ms": 60_000, "watched": True},
        ).fetchone()
        assert renewed == (epoch,)
        leader.execute("UPDATE awa.leader_lease SET expires_at = now() - interval '1 s'")
        other.execute("SET lock_timeout = '200ms'")
        with pytest.raises(errors.LockNotAvailable):
            other.execute(
                sql.LEADER_LEASE_ACQUIRE, {"holder": "other", "lease_ms": 60_000, "watched": True}
            )
        statement.commit()
        assert lead_maintenance(other, holder="other") == epoch + 1


async def test_runtime_list_shows_as_leader_only_the_lease_holder(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A leader that died kept its published is_leader for as long as its row was fresh,
    so two leaders were listed for up to a minute (a review)."""
    holder, dead = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
    for instance in (holder, dead):
        db.execute(
            "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at, "
            "last_seen_at, is_leader) VALUES (%s, 'h', 1, now(), now(), true)",
            (instance,),
        )
    db.execute(
        "UPDATE awa.leader_lease SET epoch = epoch + 1, holder = %s, "
        "expires_at = now() + interval '1 minute'",
        (holder,),
    )
    leaders = {i.instance_id: i.is_leader for i in await client.list_runtime_instances()}
    assert leaders == {holder: True, dead: False}


async def test_runtime_list_shows_a_new_leader_before_it_publishes_again(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    """A worker publishes just before it wins the election, and next 10 s later: listed
    from what it published, the new leader was no leader meanwhile (a review)."""
    holder = "33333333-3333-3333-3333-333333333333"
    db.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, started_at, "
        "last_seen_at, is_leader) VALUES (%s, 'h', 1, now(), now(), false)",
        (holder,),
    )
    db.execute(
        "UPDATE awa.leader_lease SET epoch = epoch + 1, holder = %s, "
        "expires_at = now() + interval '1 minute'",
        (holder,),
    )
    [instance] = await client.list_runtime_instances()
    assert instance.is_leader
