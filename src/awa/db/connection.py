"""How awa sets up each pooled connection."""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any, Self, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, conninfo
from psycopg.abc import Params, PQGen
from psycopg.rows import Row
from psycopg.types.json import set_json_loads

from awa.db import direct, forking, sql
from awa.errors import DatabaseError, ValidationError
from awa.serialization import Undecodable

PROBE_CONNECT_TIMEOUT_S = 10
RV = TypeVar("RV")  # what a psycopg generator returns

_decode = json.JSONDecoder().decode


def load_json(data: bytes | bytearray | memoryview | str) -> Any:
    """jsonb → Python, faster than the default for the values awa reads most.

    Empty objects and arrays (metadata, errors of a fresh job) skip the decoder, and
    bytes are decoded to str first so ``json`` need not sniff their encoding.
    """
    text = data if isinstance(data, str) else bytes(data).decode()
    if text == "{}":
        return {}
    if text == "[]":
        return []
    try:
        return _decode(text)
    except RecursionError:
        return _decode_on_a_fresh_stack(text)


def _decode_on_a_fresh_stack(text: str) -> Any:
    """Decode JSON too deep for the frames above this call (each level takes one of the
    interpreter's 1 000) in a thread of its own, whose stack is empty: a row written
    before awa refused JSON past 256 levels, or by SQL, would otherwise fail every read
    of its table that returns it — a queue's job list, the dashboard, a claim's whole
    batch. Deeper still than that thread reads, an :class:`Undecodable` says so."""
    answer: list[Any] = []

    def decode() -> None:
        try:
            answer.append(_decode(text))
        except RecursionError:
            answer.append(Undecodable(len(text)))

    thread = threading.Thread(target=decode, name="awa-deep-json")
    thread.start()
    thread.join()
    return answer[0]


async def behind_pooler(conn: AsyncConnection[Any]) -> bool:
    """True when ``conn`` reaches PostgreSQL through a connection pooler (PgBouncer…).

    A pooler answers the connection's startup itself, so the backend pid the client was
    given is the pooler's invention, not the pid of the server process that runs the
    statements. One round trip; ``conn`` must be in autocommit mode.
    """
    cur = await conn.execute(sql.SESSION_BACKEND_PID)
    row = await cur.fetchone()
    return row is not None and row[0] != conn.info.backend_pid


# libpq's TCP keepalive settings for awa's own connections, unless the URL sets its own:
# without them a connection whose path went dead (a partition, a host gone without a
# reset, a NAT dropping the flow) waits on the operating system's defaults — two hours
# of silence before the first probe — to notice, idle (the pool's, the leader's, the
# LISTEN connection) or waiting for an answer. With these it ends within about a minute;
# an idle live one sends a probe every 30 s, which also keeps NAT and firewall flows
# open. (Data sent into a dead path waits for TCP's retransmissions instead, keepalives
# or not.) Ignored over Unix sockets.
# Not tcp_user_timeout: Linux applies it to zero-window probes too, and a COPY whose
# server waits on a lock for a minute (its socket's buffer full) would be cut (a review);
# a URL may still set it.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def keepalives(url: str) -> dict[str, Any]:
    """The :data:`KEEPALIVES` settings ``url`` leaves unset, as connect() keywords. None
    at all when it turns keepalives off or names a service (``service=``, ``PGSERVICE``):
    a keyword given to connect() would win over the service file's own settings."""
    given = conninfo.conninfo_to_dict(url)
    if given.get("keepalives") in ("0", 0) or given.get("service") or os.environ.get("PGSERVICE"):
        return {}
    return {key: value for key, value in KEEPALIVES.items() if key not in given}


async def configure(conn: AsyncConnection[Any]) -> None:
    """Pool ``configure`` hook: install the JSON loader on a new connection, times in the
    ISO style, and prepared statements off behind a pooler (psycopg's and the hot path's)
    — in transaction mode each statement may run on another server connection, where the
    prepared one does not exist (PgBouncer before 1.21 supports none at all). Elsewhere
    its cursors prepare all but the statements that read whole rows (:class:`Cursor`)."""
    forking.track(conn)
    set_json_loads(load_json, conn)
    conn.cursor_factory = Cursor
    await iso_dates(conn)
    if await behind_pooler(conn):
        conn.prepare_threshold = None  # psycopg's own prepared statements
        direct.send_unnamed(conn)  # and the hot path's


class Connection(AsyncConnection[Any]):
    """The pool's connections: psycopg's, except that every operation psycopg runs on one
    first drops a direct statement's kept watch of its socket (ADR 0048). psycopg's own
    wait takes the socket's registration with the event loop over and then removes it,
    so the kept watch would wait for a wakeup that never came — until the patrol's look,
    a second later: every other conflicting single insert took 1 s, its holder looked up
    with a cursor on the insert lane's connection (a review). The next direct statement
    registers afresh."""

    async def wait(self, gen: PQGen[RV], *args: Any, **kwargs: Any) -> RV:
        direct.before_psycopg(self)
        return await super().wait(gen, *args, **kwargs)


class Cursor(AsyncCursor[Row]):
    """psycopg's cursor, except that awa's statements reading whole rows (``SELECT *``,
    ``RETURNING *``: :data:`awa.db.sql.WHOLE_ROWS`) are never prepared. Once prepared
    (psycopg prepares a statement run five times on a connection), such a statement
    failed on every call with "cached plan must not change result type" after a
    migration added a column, until its connection was replaced (a review of a rolling
    upgrade). The others, which name their columns, are prepared as psycopg does."""

    async def execute(
        self,
        query: Any,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self:
        # (A composed query, the application's in a transaction, is not hashable.)
        if prepare is None and isinstance(query, str) and query in sql.WHOLE_ROWS:
            prepare = False
        return await super().execute(query, params, prepare=prepare, binary=binary)


async def iso_dates(conn: AsyncConnection[Any]) -> None:
    """Times in the ISO style psycopg reads, unless the server already sends them so (no
    round trip then: the server reports its DateStyle at connection)."""
    style = conn.info.parameter_status("DateStyle") or ""
    if not style.startswith("ISO"):
        await conn.execute(sql.SESSION_ISO_DATES)


def where(url: str | None) -> str:
    """``host:port/dbname`` of a URL (never its password): which database, for labels.
    Parts the URL leaves to libpq's defaults are left empty; no URL: empty."""
    if url is None:
        return ""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return ""
    return f"{parts.get('host', '')}:{parts.get('port', '')}/{parts.get('dbname', '')}"


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())


def check_url(url: Any, field: str = "database_url") -> str:
    """``url`` if libpq can parse it (``postgresql://…`` or ``key=value …``), else a
    ValidationError naming ``field`` — never echoing the URL, which may hold a
    password."""
    if not isinstance(url, str):
        raise ValidationError(field, f"must be a string, got {type(url).__name__}")
    if not url.strip():
        raise ValidationError(field, "is blank")
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        reason = _one_line(str(exc).replace(url, "…"))  # libpq quotes the URL, password too
        raise ValidationError(
            field, f"not a PostgreSQL URL or key=value string: {reason}"
        ) from None
    for option, value in params.items():
        problem = _bad_option(option, str(value))
        if problem:
            raise ValidationError(field, f"{option}: {problem}")
    return url


# Options whose values libpq checks only when it connects: a URL with port "notaport" or
# sslmode "bogus" was accepted at construction and failed at first use, a DatabaseError
# (the CLI's exit 1, not its 2 for bad input; a review).
_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any", "read-write", "read-only", "primary", "standby", "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
}  # fmt: skip
_INTEGERS = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
             "tcp_user_timeout")  # fmt: skip
# As libpq's strtol reads them: a sign, digits, spaces around (a review found "+30" refused).
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def _bad_option(option: str, value: str) -> str | None:
    """What is wrong with the value of a connection option libpq (or psycopg, for
    ``connect_timeout``) would refuse, or None."""
    if option == "port":
        ports = [p for p in value.split(",") if p.strip()]
        if not all(_INTEGER.fullmatch(p) and 0 < int(p) < 65536 for p in ports):
            return "must be a port number (1–65535), or a comma-separated list of them"
    elif option == "connect_timeout":
        try:
            int(float(value))  # psycopg's own reading: "2.5" is 2 s
        except (ValueError, OverflowError):
            return "must be a number of seconds"
    elif option in _INTEGERS:
        if not _INTEGER.fullmatch(value):
            return "must be an integer"
    elif option in _CHOICES and value not in _CHOICES[option]:
        return f"must be one of {', '.join(_CHOICES[option])}"
    return None


async def probe(url: str, what: str = "the database") -> None:
    """Connect once before a pool opens (or a worker starts on ``listen_url``), so that a
    wrong URL, an unreachable server or a refused login fails at once with libpq's reason,
    as a DatabaseError — rather than as a bare pool timeout after 30 s of silent retries,
    or a listener and leader retrying for ever."""
    options: dict[str, Any] = {}
    if "connect_timeout" not in conninfo.conninfo_to_dict(url):
        options["connect_timeout"] = PROBE_CONNECT_TIMEOUT_S
    try:
        conn = await AsyncConnection.connect(url, **options)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect to {what}: {_one_line(exc)}") from exc
    encoding = conn.info.parameter_status("server_encoding") or "UTF8"
    await conn.close()
    if encoding != "UTF8":
        # Job args and every JSON value are stored as jsonb, which holds any character
        # only in a UTF8 database; awa's own statements are UTF-8 text too.
        raise DatabaseError(
            f"{what} is encoded in {encoding}: awa needs a UTF8 database "
            "(CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0)"
        )
