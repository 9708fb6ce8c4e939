"""External callbacks: resolving a parked job from outside. Each is one statement.

A handler registers a callback id (``await job.register_callback(...)``) and returns
``awa.WaitForCallback(id)``; the job waits in ``waiting_external`` until one of these
names the id, or the leader times it out.
"""

from __future__ import annotations

import uuid
from typing import Any, LiteralString

from psycopg import AsyncConnection

from awa import validate
from awa.db import sql
from awa.db.errors import mapped
from awa.db.rows import job_rows
from awa.errors import CallbackNotFound, ValidationError
from awa.serialization import encode_bounded
from awa.types import Job


def callback_uuid(value: Any) -> str:
    """A callback id as canonical UUID text, or ValidationError naming the field."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise ValidationError("callback_id", f"must be a UUID, got {value!r}")


async def _resolve(
    conn: AsyncConnection[Any], query: LiteralString, callback_id: Any, **params: Any
) -> Job[Any]:
    key = callback_uuid(callback_id)
    with mapped():
        cur = conn.cursor(row_factory=job_rows)
        await cur.execute(query, {"callback_id": key, **params})
        job = await cur.fetchone()
    if job is None:
        raise CallbackNotFound(key)
    return job


async def complete(conn: AsyncConnection[Any], callback_id: Any, payload: Any = None) -> Job[Any]:
    """Complete the job waiting for ``callback_id``; ``payload`` goes to its metadata."""
    encoded = None if payload is None else encode_bounded(payload, what="payload")
    return await _resolve(conn, sql.JOB_COMPLETE_EXTERNAL, callback_id, payload=encoded)


async def fail(conn: AsyncConnection[Any], callback_id: Any, error: str) -> Job[Any]:
    """Fail the job waiting for ``callback_id`` now, recording ``error``."""
    message = validate.text("error", error, max_length=10_000)
    return await _resolve(conn, sql.JOB_FAIL_EXTERNAL, callback_id, error=message)


async def resume(conn: AsyncConnection[Any], callback_id: Any, payload: Any = None) -> Job[Any]:
    """Answer the callback and let the job go on: a handler waiting in
    ``job.wait_for_callback`` returns ``payload``; a job parked by returning
    ``WaitForCallback`` runs again with it in ``metadata.callback_payload``."""
    encoded = None if payload is None else encode_bounded(payload, what="payload")
    return await _resolve(conn, sql.JOB_RESUME_EXTERNAL, callback_id, payload=encoded)


async def retry(conn: AsyncConnection[Any], callback_id: Any) -> Job[Any]:
    """Make the job waiting for ``callback_id`` available to run again now."""
    return await _resolve(conn, sql.JOB_RETRY_EXTERNAL, callback_id)


async def heartbeat(
    conn: AsyncConnection[Any], callback_id: Any, timeout_seconds: float
) -> Job[Any]:
    """Push the callback's timeout to ``timeout_seconds`` from now."""
    timeout = validate.seconds("timeout_seconds", timeout_seconds)
    return await _resolve(
        conn, sql.JOB_HEARTBEAT_CALLBACK, callback_id, timeout_ms=int(timeout * 1000)
    )


__all__ = ["callback_uuid", "complete", "fail", "heartbeat", "resume", "retry"]
