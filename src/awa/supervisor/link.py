"""The socket between a supervisor and each worker process it started.

The supervisor creates a socket pair per child and passes one end down (its file
descriptor in ``AWA_SUPERVISOR_FD``). The child writes one JSON line when its worker
runs (its instance id and metrics URL). The supervisor never writes: the child only waits
for end-of-file, which means the supervisor is gone — even killed by SIGKILL — and the
child then shuts down gracefully instead of running on as an orphan.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Callable
from typing import Any

LINK_ENV = "AWA_SUPERVISOR_FD"


class ChildLink:
    """The child's end: report readiness, and call back when the supervisor goes away."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._writer: asyncio.StreamWriter | None = None
        self._watch: asyncio.Task[None] | None = None

    @classmethod
    def from_environ(cls) -> ChildLink | None:
        """The link this process was started with, or None when no supervisor started it."""
        raw = os.environ.pop(LINK_ENV, None)  # not inherited by the handlers' subprocesses
        return cls(int(raw)) if raw and raw.isdigit() else None

    async def open(self, on_supervisor_gone: Callable[[], None]) -> None:
        """Connect the stream and start watching for the supervisor's end-of-file."""
        sock = socket.socket(fileno=self._fd)
        reader, self._writer = await asyncio.open_connection(sock=sock)
        self._watch = asyncio.create_task(_until_eof(reader, on_supervisor_gone))

    def ready(self, **details: Any) -> None:
        """Tell the supervisor this worker runs (and where its metrics are)."""
        if self._writer is not None:
            self._writer.write(json.dumps({"event": "ready", **details}).encode() + b"\n")

    async def close(self) -> None:
        """Stop watching and close this end. Idempotent."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _until_eof(reader: asyncio.StreamReader, callback: Callable[[], None]) -> None:
    with contextlib.suppress(OSError):
        while await reader.read(4096):
            pass
    callback()


def parse_message(line: bytes) -> dict[str, Any] | None:
    """One message a child wrote, or None for anything that is not a JSON object."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None
