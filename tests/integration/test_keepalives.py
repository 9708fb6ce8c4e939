"""awa's own connections probe a silent TCP path (libpq keepalives), unless the URL says
otherwise: on the operating system's defaults a dead path was noticed after two hours,
and every statement waiting on it waited as long (a review)."""

from __future__ import annotations

import socket
from typing import Any

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
            assert conn.info.get_parameters()["tcp_user_timeout"] == "60000"
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
