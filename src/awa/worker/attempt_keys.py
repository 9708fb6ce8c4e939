"""Attempts named by their fencing keys in statements, and which of them an operator
cancelled: the heartbeat asks for attempts that lost their lease, the completer for
outcomes a write found stale (a handler that returned just after the cancel committed).
Either way a cancel is reported as one, not as a lost lease."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from awa.db import sql
from awa.worker.results import AttemptKey


def key_arrays(keys: list[AttemptKey]) -> dict[str, list[Any]]:
    """``keys`` as the three arrays the statements unnest."""
    return {
        "ids": [key[0] for key in keys],
        "run_leases": [key[1] for key in keys],
        "attempted_ats": [key[2] for key in keys],
    }


async def cancelled_among(conn: AsyncConnection[Any], keys: list[AttemptKey]) -> set[int]:
    """The ids among ``keys`` whose row an operator cancelled under the attempt's key."""
    cur = await conn.execute(sql.JOB_CANCELLED_AMONG, key_arrays(keys))
    return {row[0] for row in await cur.fetchall()}
