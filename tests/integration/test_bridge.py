"""awa.bridge.insert_job inside the application's own transaction."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest
import sqlalchemy
from psycopg.rows import dict_row
from sqlalchemy.orm import Session

import awa
from awa.bridge import insert_job


def _count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM awa.jobs").fetchone()
    return int(row[0]) if row else -1


def test_sync_psycopg_connection_commits_and_rolls_back(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(database_url) as conn:
        job = insert_job(conn, {"x": 1}, kind="k", queue="q")
        assert isinstance(job, awa.Job) and job.queue == "q"
        assert _count(db) == 0  # not committed yet
        conn.commit()
    assert _count(db) == 1
    with psycopg.connect(database_url) as conn:
        insert_job(conn, {"x": 2}, kind="k")
        conn.rollback()
    assert _count(db) == 1


def test_the_queue_defaults_as_client_insert_does_when_given_the_client(
    database_url: str, sync_client: awa.Client
) -> None:
    @sync_client.task(None, kind="mail", queue="email")
    def mail(job: awa.Job[Any]) -> None:
        return None

    with psycopg.connect(database_url) as conn:
        registered = insert_job(conn, {"to": "a"}, kind="mail", client=sync_client)
        no_client = insert_job(conn, {"to": "b"}, kind="mail", queue=None)
        named = insert_job(conn, {"to": "c"}, kind="mail", queue="other", client=sync_client)
        conn.commit()
    assert isinstance(registered, awa.Job) and registered.queue == "email"
    assert isinstance(no_client, awa.Job) and no_client.queue == "default"
    assert isinstance(named, awa.Job) and named.queue == "other"


async def test_async_psycopg_connection(database_url: str, db: psycopg.Connection[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        job = await insert_job(conn, {"x": 1}, kind="k")  # type: ignore[misc]
        await conn.commit()
    assert job.kind == "k" and _count(db) == 1


def test_sqlalchemy_session(database_url: str, db: psycopg.Connection[Any]) -> None:
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(database_url)
    )
    try:
        with Session(engine) as session:
            session.execute(sqlalchemy.text("CREATE TABLE orders (id int)"))
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES (1)"))
            insert_job(session, {"order": 1}, kind="ship")
            session.commit()
        with Session(engine) as session:
            insert_job(session, {"order": 2}, kind="ship")
            session.rollback()
    finally:
        engine.dispose()
    assert _count(db) == 1


def test_bad_connection_and_bad_values_are_rejected(database_url: str) -> None:
    with pytest.raises(awa.ValidationError, match="conn"):
        insert_job(object(), {"x": 1}, kind="k")
    with (
        psycopg.connect(database_url) as conn,
        pytest.raises(awa.ValidationError, match="priority"),
    ):
        insert_job(conn, {"x": 1}, kind="k", priority=7)


def _sync_engine(database_url: str) -> sqlalchemy.Engine:
    return sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(database_url)
    )


def _async_engine(database_url: str) -> Any:
    from sqlalchemy.ext.asyncio import create_async_engine

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(database_url)

    return create_async_engine("postgresql+psycopg://", async_creator=connect)


def test_sqlalchemy_connection(database_url: str, db: psycopg.Connection[Any]) -> None:
    """Issue 20.3: a Connection (not a Session) used to be taken for a Session."""
    engine = _sync_engine(database_url)
    try:
        with engine.connect() as conn:
            job = insert_job(conn, {"order": 1}, kind="ship")
            assert isinstance(job, awa.Job) and job.kind == "ship"
            assert _count(db) == 0  # inside the connection's transaction
            conn.commit()
        with engine.begin() as conn:  # the usual "commit on success" block
            insert_job(conn, {"order": 2}, kind="ship")
        with engine.connect() as conn:
            insert_job(conn, {"order": 3}, kind="ship")
            conn.rollback()
    finally:
        engine.dispose()
    assert _count(db) == 2


async def test_sqlalchemy_async_session(database_url: str, db: psycopg.Connection[Any]) -> None:
    """Issue 20.2: the usual FastAPI set-up, an AsyncSession on postgresql+psycopg."""
    from sqlalchemy.ext.asyncio import AsyncSession

    engine = _async_engine(database_url)
    try:
        async with AsyncSession(engine) as session:
            await session.execute(sqlalchemy.text("CREATE TABLE orders (id int)"))
            await session.execute(sqlalchemy.text("INSERT INTO orders VALUES (1)"))
            job = await insert_job(session, {"order": 1}, kind="ship")  # type: ignore[misc]
            assert job.kind == "ship" and _count(db) == 0
            await session.commit()
        async with AsyncSession(engine) as session:
            await insert_job(session, {"order": 2}, kind="ship")  # type: ignore[misc]
            await session.rollback()
    finally:
        await engine.dispose()
    assert _count(db) == 1
    row = db.execute("SELECT count(*) FROM orders").fetchone()
    assert row is not None and row[0] == 1  # the application's row and the job, together


async def test_sqlalchemy_async_connection(database_url: str, db: psycopg.Connection[Any]) -> None:
    engine = _async_engine(database_url)
    try:
        async with engine.connect() as conn:
            job = await insert_job(conn, {"order": 1}, kind="ship", queue="q")  # type: ignore[misc]
            assert job.queue == "q" and _count(db) == 0
            await conn.commit()
        async with engine.begin() as conn:
            await insert_job(conn, {"order": 2}, kind="ship")  # type: ignore[misc]
        async with engine.connect() as conn:
            await insert_job(conn, {"order": 3}, kind="ship")  # type: ignore[misc]
            await conn.rollback()
        async with engine.connect() as conn:  # validation fails before any I/O
            with pytest.raises(awa.ValidationError, match="priority"):
                await insert_job(conn, {"order": 4}, kind="ship", priority=9)  # type: ignore[misc]
    finally:
        await engine.dispose()
    assert _count(db) == 2


def test_sqlalchemy_on_another_driver_is_refused_by_name() -> None:
    engine = sqlalchemy.create_engine("sqlite://")
    try:
        with engine.connect() as conn, pytest.raises(awa.ValidationError, match="psycopg"):
            insert_job(conn, {"x": 1}, kind="k")
        with Session(engine) as session, pytest.raises(awa.ValidationError, match="psycopg"):
            insert_job(session, {"x": 1}, kind="k")
    finally:
        engine.dispose()


def test_sqlalchemy_session_subclass(database_url: str, db: psycopg.Connection[Any]) -> None:
    class AppSession(Session):  # applications often subclass the session
        pass

    engine = _sync_engine(database_url)
    try:
        with AppSession(engine) as session:
            insert_job(session, {"order": 1}, kind="ship")
            session.commit()
    finally:
        engine.dispose()
    assert _count(db) == 1


def test_a_connection_returning_dicts_gets_its_job(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The application's own row factory: the job is still read back, not half-inserted.
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        job = insert_job(conn, {"x": 1}, kind="k")
        assert isinstance(job, awa.Job) and job.kind == "k"
        conn.commit()
    assert _count(db) == 1


async def test_a_caught_unique_conflict_keeps_the_callers_transaction(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE orders (id int)")
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO orders VALUES (1)")
        first = insert_job(conn, {"order": 1}, kind="ship", unique_opts={})
        with pytest.raises(awa.UniqueConflict) as refused:  # enqueued already: fine, go on
            insert_job(conn, {"order": 1}, kind="ship", unique_opts={})
        assert isinstance(first, awa.Job) and refused.value.existing_id == first.id
        conn.execute("INSERT INTO orders VALUES (2)")
        conn.commit()
    async with await psycopg.AsyncConnection.connect(database_url) as aconn:
        with pytest.raises(awa.UniqueConflict) as refused:
            await insert_job(aconn, {"order": 1}, kind="ship", unique_opts={})  # type: ignore[misc]
        assert refused.value.existing_id == first.id
        await aconn.execute("INSERT INTO orders VALUES (3)")
        await aconn.commit()
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(database_url)
    )
    try:
        with Session(engine) as session:
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES (4)"))
            with pytest.raises(awa.UniqueConflict):
                insert_job(session, {"order": 1}, kind="ship", unique_opts={})
            session.commit()
    finally:
        engine.dispose()
    assert db.execute("SELECT array_agg(id ORDER BY id) FROM orders").fetchone() == ([1, 2, 3, 4],)
    assert _count(db) == 1


def test_an_insert_item_is_not_args_here_either(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(awa.ValidationError, match="InsertItem"):
            insert_job(conn, awa.InsertItem({"a": 1}, kind="k"), kind="k")


def test_the_bridge_is_there_after_a_plain_import_awa() -> None:
    """README and CONTRACT write `awa.bridge.insert_job(...)` after `import awa`: it was an
    AttributeError until something imported awa.bridge itself (a review)."""
    done = subprocess.run([sys.executable, "-c", "import awa; print(awa.bridge.insert_job)"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "insert_job" in done.stdout, done.stderr
