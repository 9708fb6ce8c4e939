"""Helpers shared by tests: polling with a timeout instead of sleeping; the import path
of the processes a test starts."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from awa.db import migrations, sql

ROOT = Path(__file__).resolve().parents[1]
CHILD_PYTHONPATH = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
"""A child process's PYTHONPATH: the checkout's awa (not whatever awa the venv has
installed: a worktree or a copy tested its children against another tree's code, a
review) and the test apps (``tests.apps``)."""

SESSION = f"{os.getpid()}_{secrets.token_hex(4)}"
"""In every database name a test session makes (and the only ones it drops): the pid
alone was shared by two suites in containers against one DATABASE_URL (both pid 1), and
each dropped the other's template (a review)."""


async def wait_for(
    predicate: Callable[[], Awaitable[Any]], *, timeout: float = 15.0, interval: float = 0.02
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        await asyncio.sleep(interval)


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 15.0, interval: float = 0.02
) -> Any:
    """Blocking twin of :func:`wait_for` for synchronous tests."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(interval)


FAST_WORKER = {
    "poll_interval_ms": 50,
    "promote_interval_ms": 50,
    "heartbeat_interval_ms": 200,
    "heartbeat_staleness_ms": 1_500,
    "heartbeat_rescue_interval_ms": 200,
    "deadline_rescue_interval_ms": 200,
    "leader_election_interval_ms": 100,
}
"""Worker settings that make promotion, heartbeats and rescue fast enough for tests."""


def lead_maintenance(conn: psycopg.Connection[Any], holder: str = "test") -> int:
    """Take the maintenance lease for an hour, as an elected leader would, and return its
    epoch: what maintenance functions and statements called directly are fenced by."""
    row = conn.execute(
        sql.LEADER_LEASE_ACQUIRE, {"holder": holder, "lease_ms": 3_600_000, "watched": True}
    ).fetchone()
    assert row is not None, "the lease is held by a live worker"
    return int(row[0])


def noop_task(client: Any, queue: str = "q", kind: str = "noop") -> None:
    """Register a handler that does nothing, for tests that start a worker only for its
    services (leader, overrides, registry): ``start()`` needs at least one handler."""

    def noop(job: Any) -> None:
        return None

    client.task(None, kind=kind, queue=queue)(noop)


def running_jobs(db: psycopg.Connection[Any], queue: str) -> int:
    """Jobs of ``queue`` in state ``running`` now, as the database says."""
    row = db.execute(
        "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state = 'running'", (queue,)
    ).fetchone()
    assert row is not None
    return int(row[0])


async def statements_running(
    db: psycopg.Connection[Any], opening: str, *, on_a_lock: bool = False
) -> int:
    """Statements of this database that start with ``opening`` and run now (``on_a_lock``:
    those waiting for a lock). pg_stat_activity keeps a statement's first 1 KiB: awa's
    open with a comment naming them (``-- job_insert``)."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND starts_with(query, %s) "
        "AND CASE WHEN %s THEN wait_event_type = 'Lock' ELSE state = 'active' END",
        (opening, on_a_lock),
    ).fetchone()
    assert row is not None
    return int(row[0])


def stop_migrations_before(
    monkeypatch: pytest.MonkeyPatch, version: int
) -> Callable[[], list[int]]:
    """Make ``migrate()`` stop before migration ``version`` (to test an upgrade from the
    schema before it); the returned function puts every migration back and returns the
    versions an upgrade then applies."""
    every = migrations.migrations()
    monkeypatch.setattr(migrations, "migrations", lambda: [m for m in every if m.version < version])

    def go_on() -> list[int]:
        monkeypatch.setattr(migrations, "migrations", lambda: every)
        return [m.version for m in every if m.version >= version]

    return go_on


def skewed_datetime(offset: timedelta) -> type[datetime]:
    """``datetime`` as a host sees it whose clock is ``offset`` from the database's (to
    monkeypatch into one module: what it reads from its own clock)."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz) + offset

    return Skewed
