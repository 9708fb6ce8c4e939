"""A pool whose server was gone for a while comes back with it, and says why it had no
connection meanwhile. The server's absence is a proxy in front of it that drops every
connection and refuses new ones, as a stopped server does."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import suppress

import pytest
from psycopg import conninfo
from psycopg_pool.base import AttemptWithBackoff

import awa
from awa.db import pool as pool_module
from tests.helpers import wait_for


class GatedProxy:
    """Forwards a local port to the server of ``database_url``; :meth:`down` closes every
    connection through it and refuses new ones until :meth:`up`."""

    def __init__(self, database_url: str) -> None:
        params = conninfo.conninfo_to_dict(database_url)
        host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
        self._target = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self._open = True
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = conninfo.make_conninfo(
            database_url, host="127.0.0.1", port=self._server.getsockname()[1]
        )
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        with self._lock:
            self._open = False
            for sock in self._sockets:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def up(self) -> None:
        with self._lock:
            self._open = True

    def close(self) -> None:
        self.down()
        with suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if not self._open:
                    client.close()  # as a stopped server: the connection ends at once
                    continue
                upstream = _connect(self._target)
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    for sock in (src, dst):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _connect(target: str | tuple[str, int]) -> socket.socket:
    if isinstance(target, tuple):
        return socket.create_connection(target)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(target)
    return sock


@pytest.fixture
def proxy(database_url: str) -> Iterator[GatedProxy]:
    gate = GatedProxy(database_url)
    yield gate
    gate.close()


async def test_a_long_outage_does_not_stretch_the_pools_wait_past_its_cap(
    proxy: GatedProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg_pool doubled its wait between reconnect attempts without bound: after a
    minute's outage a warm client failed every call for up to a minute more with the
    server back (a review). Time is scaled down here: attempts 0.1 s apart at first,
    capped at 0.2 s; 3.5 s down leaves psycopg_pool's own next attempt 2.8 s after the
    server is back, the capped one at most 0.2 s."""
    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 0.1)
    monkeypatch.setattr(pool_module, "RECONNECT_DELAY_MAX_S", 0.2)
    client = awa.AsyncClient(proxy.url)
    client.pool_timeout_s = 0.5
    try:
        await client.migrate()
        proxy.down()
        with pytest.raises(awa.DatabaseError, match="the last attempt to connect failed"):
            await client.insert({}, kind="k")  # a call during the outage: the pool retries
        await asyncio.sleep(3.5)  # the outage's length, not a synchronisation
        proxy.up()

        async def served() -> bool:
            with suppress(awa.DatabaseError):
                await client.insert({}, kind="k")
                return True
            return False

        await wait_for(served, timeout=1.5, interval=0.05)
    finally:
        await client.close()
