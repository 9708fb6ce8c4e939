"""What a stretch of work cost: CPU of the client processes and of the server, WAL bytes,
transactions. Read from /proc and from the server's own counters, never from the system
under test.

- Server CPU: the postmaster's user + system time including its reaped children (backends
  that exited during the window), plus every live descendant's. Includes the server's
  background processes (WAL writer, checkpointer, autovacuum), which are part of the cost.
- Client CPU: the given processes and their descendants.
- WAL: ``pg_current_wal_insert_lsn()`` (records inserted, flushed or not, so asynchronous
  commits count too).
- Transactions: ``xact_commit + xact_rollback`` of the database in ``pg_stat_database``.
  Backends publish these counters when they go idle (at most once a second) and when they
  exit, so read them after the clients have disconnected, or over windows of many seconds.
  With autocommit, one statement is one transaction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psycopg

TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:  # the process exited while we looked
        return found
    for task in tasks:
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found


def tree_cpu(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds (user + system) of ``pid`` and its live descendants; with ``reaped`` the
    root's exited, waited-for children count too."""
    total, stack, root = 0, [pid], True
    while stack:
        current = stack.pop()
        fields = _stat_fields(current)
        if fields is not None:
            # utime, stime, cutime, cstime are fields 14-17 (index 11-14 from field 3)
            total += int(fields[11]) + int(fields[12])
            if root and reaped:
                total += int(fields[13]) + int(fields[14])
            stack += _children(current)
        root = False
    return total / TICK


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


@dataclass(frozen=True)
class Reading:
    server_cpu: float | None
    client_cpu: float
    wal: int
    xacts: int


class Meter:
    """Readings of one database of one server, and of some client processes."""

    def __init__(self, url: str, database: str) -> None:
        self.url = url
        self.database = database
        with psycopg.connect(url, autocommit=True) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        self.postmaster = parent_of(int(backend[0])) if backend else None

    def read(self, clients: list[int]) -> Reading:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn,"
                " (SELECT xact_commit + xact_rollback FROM pg_stat_database"
                "  WHERE datname = %s)",
                (self.database,),
            ).fetchone()
        assert row is not None
        server = None if self.postmaster is None else tree_cpu(self.postmaster, reaped=True)
        return Reading(
            server_cpu=server,
            client_cpu=sum(tree_cpu(pid) for pid in clients),
            wal=int(row[0]),
            xacts=int(row[1] or 0),
        )


def per_unit(before: Reading, after: Reading, units: int) -> dict[str, float]:
    """Costs per job (or insert) between two readings; CPU in microseconds."""
    out = {
        "client_cpu_us_per_job": (after.client_cpu - before.client_cpu) * 1e6 / units,
        "wal_bytes_per_job": (after.wal - before.wal) / units,
        "xacts_per_job": (after.xacts - before.xacts) / units,
    }
    if before.server_cpu is not None and after.server_cpu is not None:
        out["server_cpu_us_per_job"] = (after.server_cpu - before.server_cpu) * 1e6 / units
    return out
