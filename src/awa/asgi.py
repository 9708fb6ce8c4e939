"""The bare ASGI pieces awa's two dependency-free apps share (the callback receiver and
the metrics endpoint): the types of an ASGI call, a whole response, and the lifespan
protocol answered with nothing to start or stop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    """Send one whole response."""
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the server's startup and shutdown: these apps hold nothing to open or close."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
