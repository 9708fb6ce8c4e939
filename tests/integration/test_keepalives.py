"""awa's own connections probe a silent TCP path (libpq keepalives), unless the URL says
otherwise: on the operating system's defaults a dead path was noticed after two hours,
and every statement waiting on it waited as long (a review)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from psycopg import conninfo

import awa
from awa.db.connection import KEEPALIVES, keepalives


def _over_tcp(database_url: str, **extra: Any) -> str:
    params = conninfo.conninfo_to_dict(database_url)
    if str(params.get("host", "")).startswith("/"):  # the embedded server's socket
        params["host"] = "127.0.0.1"
    return conninfo.make_conninfo(**{**params, **extra})


def _idle_seconds(conn: Any) -> int:
    """The kernel's keepalive idle time on the connection's own socket."""
    sock = socket.socket(fileno=socket.dup(conn.pgconn.socket))
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
    finally:
        sock.close()


async def test_pooled_connections_probe_a_silent_path(database_url: str) -> None:
    client = awa.AsyncClient(_over_tcp(database_url))
    try:
        pool = await client._get_pool()
        async with pool.connection() as conn:
            assert _idle_seconds(conn) == KEEPALIVES["keepalives_idle"]
            # Not tcp_user_timeout: a COPY waiting a minute on a lock would be cut.
            assert conn.info.get_parameters().get("tcp_user_timeout", "0") == "0"
    finally:
        await client.close()


async def test_the_urls_own_settings_win(database_url: str) -> None:
    url = _over_tcp(database_url, keepalives_idle=7)
    assert "keepalives_idle" not in keepalives(url)
    client = awa.AsyncClient(url)
    try:
        pool = await client._get_pool()
        async with pool.connection() as conn:
            assert _idle_seconds(conn) == 7
    finally:
        await client.close()


def test_a_service_or_keepalives_off_gets_no_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyword given to connect() wins over a service file's settings (a review: a
    service's keepalives_idle=7 ran as 30)."""
    monkeypatch.delenv("PGSERVICE", raising=False)
    assert keepalives("host=db.example dbname=app") == KEEPALIVES
    assert keepalives("service=mysvc") == {}
    assert keepalives("postgresql://db.example/app?keepalives=0") == {}
    monkeypatch.setenv("PGSERVICE", "mysvc")
    assert keepalives("dbname=app") == {}
