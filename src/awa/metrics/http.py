"""Serving ``/metrics``: a small threaded HTTP server, and an ASGI app to mount.

The server runs in its own daemon thread, so rendering never runs on the worker's event
loop; it refreshes the queue statistics on that loop (see :mod:`awa.metrics.gauges`).
"""

from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

from awa.asgi import Receive, Scope, Send, lifespan, respond

if TYPE_CHECKING:
    from awa.metrics.core import Metrics

logger = logging.getLogger("awa")


class Renderer(Protocol):
    """What the server renders: one client's :class:`Metrics`, or a supervisor's fleet."""

    def render(self, *, stats: bool = True) -> bytes:
        """The Prometheus text exposition (``stats=False``: without queue depth, lag and
        pause, which cost a query)."""
        ...


class MetricsServer:
    """``GET /metrics`` on ``host:port`` from a daemon thread. ``port=0`` picks a free port.

    ``start``/``stop`` are idempotent; also a context manager.
    """

    def __init__(self, metrics: Renderer, *, port: int, host: str = "127.0.0.1") -> None:
        self.metrics = metrics
        self._httpd = _listening(host, port, _handler(metrics))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        """The address bound."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        """The port bound (the real one when 0 was asked)."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> MetricsServer:
        """Start serving in a daemon thread; returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, name="awa-metrics", daemon=True
            )
            self._thread.start()
            logger.info(
                "metrics served on %s",
                self.url,
                extra={"event": "metrics_serving", "url": self.url},
            )
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._httpd.shutdown()
            thread.join()
        self._httpd.server_close()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _IPv6HTTPServer(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _listening(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server bound to ``host``, in its address family: ``ThreadingHTTPServer`` is
    IPv4's only, and ``::1`` failed to bind (a review). A host that does not resolve
    raises :class:`socket.gaierror`; ``""`` is every IPv4 interface, as it always was."""
    if not host:
        return ThreadingHTTPServer((host, port), handler)
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    server = _IPv6HTTPServer if family[0][0] == socket.AF_INET6 else ThreadingHTTPServer
    return server((host, port), handler)


def _handler(metrics: Renderer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._serve(head=False)

        def do_HEAD(self) -> None:
            # Load balancers and uptime probes check with HEAD: same status, no body.
            self._serve(head=True)

        def _serve(self, *, head: bool) -> None:
            path, _, query = self.path.partition("?")
            if path not in ("/metrics", "/metrics/"):
                self._reply(
                    404, b"not found: scrape /metrics\n", "text/plain; charset=utf-8", head=head
                )
                return
            # A supervisor asks all but one of its children without the statistics.
            without_stats = "stats=0" in query.split("&")
            try:
                body = metrics.render(stats=False) if without_stats else metrics.render()
            except Exception as exc:  # never let a scrape take the server down
                logger.exception("metrics: rendering failed")
                self._reply(500, f"{exc}\n".encode(), "text/plain; charset=utf-8", head=head)
                return
            self._reply(200, body, CONTENT_TYPE_LATEST, head=head)

        def _reply(self, status: int, body: bytes, content_type: str, *, head: bool) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the scraper gave up: fine
                logger.debug("metrics: the scraper left before the reply")

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("metrics: " + format, *args)

    return Handler


class MetricsApp:
    """An ASGI app answering every GET with the metrics (mount it at ``/metrics``).

    It refreshes the queue statistics on the serving event loop, then renders.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("method", "GET") not in ("GET", "HEAD"):
            await respond(send, 405, b"method not allowed\n", "text/plain; charset=utf-8")
            return
        await self.metrics.refresh()
        body = self.metrics.render()
        if scope.get("method") == "HEAD":
            body = b""
        await respond(send, 200, body, CONTENT_TYPE_LATEST)
