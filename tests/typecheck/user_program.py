"""A user's program as the README writes it, type-checked by tests/unit/test_public_typing.py
with mypy --strict: the correct part must pass, each line marked ``E:`` must fail. Never
imported or run."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg

import awa


@dataclasses.dataclass
class SendEmail:
    to: str


@dataclasses.dataclass
class Report:
    rows: int


client = awa.AsyncClient("postgresql://localhost/app")
sync = awa.Client("postgresql://localhost/app")


@client.task(SendEmail, queue="email")
async def send(job: awa.Job[SendEmail]) -> None:
    print(job.args.to)


@sync.task(SendEmail, queue="email")
def send_sync(job: awa.Job[SendEmail]) -> awa.RetryAfter | None:
    return None


@client.task(kind="poll")
def poll(job: awa.Job[Any]) -> None: ...


def completed(event: awa.JobCompleted) -> None: ...


client.on_event("completed", completed)
client.on_event(awa.JobCompleted, completed)
sync.on_event("*", lambda e: print(e.job.id))
sync.periodic("daily", "0 3 * * *", Report(1), timezone="UTC")


def signup(conn: psycopg.Connection[Any]) -> int:
    return awa.bridge.insert_job(conn, SendEmail("a@x")).id


async def asignup(conn: psycopg.AsyncConnection[Any]) -> int:
    return (await awa.bridge.insert_job(conn, SendEmail("a@x"))).id


class MyClient(awa.AsyncClient):
    def extra(self) -> int:
        return 1


async def sub() -> int:
    async with MyClient("postgresql://localhost/app") as mine:
        return mine.extra()


async def sa(session: Any) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    async def a(s: AsyncSession) -> int:
        return (await awa.bridge.insert_job(s, SendEmail("x"))).id

    def b(s: Session) -> int:
        return awa.bridge.insert_job(s, SendEmail("x")).id


async def run_worker() -> None:
    await client.start([("email", 10)], heartbeat_interval_ms=5_000, synchronous_commit=True)
    sync.start(global_max_workers=8, handoff_seats=0)
    settings: dict[str, Any] = {"cron_interval_ms": 500}
    await client.start(**settings)  # settings read from a file: checked at start


async def in_transaction() -> None:
    async with client.transaction() as tx:
        await tx.insert(SendEmail("a@x"), queue="email", priority=1)
        await tx.insert_many([SendEmail("b@x")], run_at=None)


# -- each line marked "E:" must be an error, and no other line ------------------------


@client.task(SendEmail, queue="email")  # E: wrong args type
async def wrong(job: awa.Job[Report]) -> None: ...


@sync.task(Report)  # E: no job parameter
def nothing() -> None: ...


def on_done(job: awa.Job[SendEmail]) -> None: ...


client.on_event("completed", on_done)  # E: a hook takes the event
sync.on_event("completed", completed, jobkind=SendEmail)  # E: a typo
sync.periodic("p", "* * * * *", Report(1), tiemzone="UTC")  # E: a typo


async def misspelt() -> None:
    async with client.transaction() as tx:
        await tx.insert(SendEmail("a@x"), priorty=1)  # E: a typo


async def stored_args_are_dicts() -> None:
    job = await client.insert(SendEmail("a@x"))
    stored = sync.get_job(job.id)
    assert stored.args["to"] == job.args["to"]  # the stored JSON object
    to: str = job.args.to  # E: args of an inserted job are a dict, not the task's type
    assert to


async def every_returned_job_is_stored(conn: psycopg.AsyncConnection[Any]) -> None:
    bridged = await awa.bridge.insert_job(conn, SendEmail("a@x"))
    resumed = await client.complete_external("id")
    dead = await client.retry_from_dlq([1])
    to: str = bridged.args.to  # E: the async bridge's job is stored too
    again: str = resumed.args.to  # E: so is a callback's
    last: str = dead[0].args.to  # E: and a DLQ retry's
    assert to and again and last


async def start_settings_are_typed() -> None:
    await client.start(hartbeat_interval_ms=5_000)  # E: a typo
    sync.start(synchronous_commit="on")  # E: a bool, not a string
    sync.start(heartbeat_interval_ms=5.5)  # E: milliseconds are an int
