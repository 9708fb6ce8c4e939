"""A TCP proxy between one worker and the server that can go silent, as a network
partition does: it stops forwarding in both directions and closes nothing, so neither
end notices (no reset, no end of stream) — unlike a killed process or backend. It can
also go down as a stopped server does: every connection closed, new ones refused."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress

from psycopg import conninfo


class FreezableProxy:
    """Forwards 127.0.0.1:``port`` to the server of ``database_url`` (TCP or Unix socket);
    :attr:`url` reaches that database through it; :meth:`freeze` holds every byte."""

    def __init__(self, database_url: str) -> None:
        params = conninfo.conninfo_to_dict(database_url)
        host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
        self._target: str | tuple[str, int] = (
            f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        )
        self._flowing = threading.Event()
        self._flowing.set()
        self._up = True
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.url = conninfo.make_conninfo(database_url, host="127.0.0.1", port=self.port)
        self._sockets: list[socket.socket] = [self._server]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        """Stop forwarding: bytes already read are held until :meth:`thaw`."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def down(self) -> None:
        """As a stopped server: close every connection through it, refuse new ones."""
        with self._lock:
            self._up = False
            for sock in self._sockets[1:]:  # all but the listening socket
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            del self._sockets[1:]

    def up(self) -> None:
        with self._lock:
            self._up = True

    def close(self) -> None:
        self._flowing.set()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            self._flowing.wait()  # a partition refuses nothing, it just never answers
            with self._lock:
                if not self._up:
                    client.close()  # as a stopped server: the connection ends at once
                    continue
                upstream = _connect(self._target)
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                self._flowing.wait()
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
