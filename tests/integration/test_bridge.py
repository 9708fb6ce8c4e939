"""awa.bridge.insert_job inside the application's own transaction."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import sqlalchemy
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
