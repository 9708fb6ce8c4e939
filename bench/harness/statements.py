"""``EXPLAIN (ANALYZE, BUFFERS, WAL)`` of awa's hot statements, on a database holding a
W1 backlog. Each runs inside a transaction that is rolled back, so the plans see the
same rows; the finalize is explained over 32 jobs claimed (and committed) beforehand.
"""

from __future__ import annotations

import json
from typing import Any, LiteralString

import psycopg

from awa.db import sql

CLAIM = {
    "queue": "default",
    "limit": 32,
    "deadline_ms": 300_000,
    "synchronous_commit": "off",
    "instance": None,
    "held": None,
}
INSERT = {
    "kind": "noop",
    "queue": "default",
    "args": '{"seq": 1}',
    "priority": 2,
    "max_attempts": 25,
    "tags": "{}",
    "metadata": "{}",
    "run_at": None,
    "unique_key": None,
    "unique_states": None,
}


def _explain(conn: psycopg.Connection[Any], query: LiteralString, params: dict[str, Any]) -> str:
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) " + query, params)
        return "\n".join(str(r[0]) for r in rows.fetchall())


def _outcomes(conn: psycopg.Connection[Any]) -> str:
    """32 jobs claimed for real, as the completer would report them completed."""
    rows = conn.execute(sql.JOB_CLAIM_AVAILABLE, CLAIM).fetchall()
    records = [
        {
            "id": row[0],
            "run_lease": row[8],
            "attempted_at": row[15].isoformat(),
            "state": "completed",
        }
        for row in rows
    ]
    return json.dumps(records)


def explain_hot_statements(url: str) -> str:
    parts = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE awa.jobs")
        plans = [
            ("job_insert (one job)", sql.JOB_INSERT, INSERT),
            ("job_claim_available (32 jobs)", sql.JOB_CLAIM_AVAILABLE, CLAIM),
        ]
        finalize = {"outcomes": _outcomes(conn), "synchronous_commit": "off", "claims": None}
        plans.append(("job_finalize_many (32 outcomes)", sql.JOB_FINALIZE_MANY, finalize))
        for title, query, params in plans:
            parts += [f"`{title}`:", "", "```", _explain(conn, query, params), "```", ""]
    return "\n".join(parts)
