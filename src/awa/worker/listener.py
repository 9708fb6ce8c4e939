"""LISTEN for wake-ups and control notices on one dedicated connection.

``awa_available`` carries a queue name: wake that queue's dispatcher. ``awa_control``
carries JSON: a job to cancel, or a queue whose control row changed. After every
(re)connect all dispatchers are woken, since notices sent while disconnected are lost.

LISTEN needs a session of its own on the server. Through a pooler (PgBouncer in
transaction mode) the session behind the connection changes under it and notices are
lost, so there the listener closes its connection at once, says so once, and idles: the
dispatchers poll every ``poll_interval_ms`` as they always do, cancels reach handlers at
the next heartbeat, and overrides apply within ``override_refresh_ms``. ``listen_url=``
names a direct connection for LISTEN instead.

A LISTEN connection only receives: one that goes silent without closing (a NAT or
firewall dropping an idle flow, a network partition, a proxy that stopped forwarding)
would never be noticed, and this worker would go on parking handoff seats that producers
fill and whose notices never come. So every ``PROBE_EVERY_S`` the connection is asked a
``SELECT 1``; no answer within ``PROBE_TIMEOUT_S`` and it is dropped and made again (the
reconnect's resync gives the seats' permits back).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection

from awa.db import forking
from awa.db.connection import behind_pooler, keepalives
from awa.log import fault, traceback_unless_expected
from awa.service import LoopService

logger = logging.getLogger("awa")

AVAILABLE_CHANNEL = "awa_available"
CONTROL_CHANNEL = "awa_control"

PROBE_EVERY_S = 10.0
PROBE_TIMEOUT_S = 5.0


class ListenerSilent(ConnectionError):
    """The LISTEN connection did not answer a probe in time (a network fault: logged as
    one line, without a traceback)."""


class Listener(LoopService):
    """Keeps a LISTEN connection open, reconnecting with backoff."""

    def __init__(
        self,
        url: str,
        on_available: Callable[[str], None],
        on_control: Callable[[dict[str, Any]], None],
        on_connect: Callable[[], None],
        handoff: tuple[str, Callable[[str], None]] | None = None,
        on_disconnect: Callable[[], None] | None = None,
        url_name: str = "the database URL",
    ) -> None:
        super().__init__("listener")
        self._url = url
        self._url_name = url_name  # which setting ``url`` came from, for the notice
        self._on_available = on_available
        self._on_control = on_control
        self._on_connect = on_connect
        # This worker's own channel: jobs claimed for it at their insert's commit (ADR 0045).
        self._handoff_channel = handoff[0] if handoff else ""
        self._on_handoff: Callable[[str], None] | None = handoff[1] if handoff else None
        self._on_disconnect = on_disconnect
        self.connections = 0
        self.polling_only = False  # LISTEN is impossible through the URL given (a pooler)
        # The LISTEN connection's server process while it is up: seats name it, so a
        # producer hands no job to a worker whose listener is gone (migration 0019).
        self.backend_pid: int | None = None

    @property
    def connected(self) -> bool:
        """True while the LISTEN connection is up (its last round worked)."""
        return self.alive and self.healthy and not self.polling_only

    async def _after_stop(self) -> None:
        self.healthy = False

    async def _run(self) -> None:
        backoff = 0.05
        failures = 0  # attempts failed since the connection was last up
        self.healthy = False
        while not self.stopping:
            try:
                connect = AsyncConnection.connect(
                    self._url, autocommit=True, **keepalives(self._url)
                )
                async with forking.track(await connect) as conn:
                    if await behind_pooler(conn):
                        break
                    await conn.execute(f"LISTEN {AVAILABLE_CHANNEL}")
                    await conn.execute(f"LISTEN {CONTROL_CHANNEL}")
                    if self._handoff_channel:
                        await conn.execute(f"LISTEN {self._handoff_channel}")  # an identifier
                    self.healthy = True
                    self.backend_pid = conn.info.backend_pid
                    self.connections += 1
                    if failures:  # its loss was a WARNING: say it is over
                        logger.info(
                            "listener: reconnected after %d failed attempt(s)", failures,
                            extra={"event": "listener_reconnected"},
                        )  # fmt: skip
                    backoff, failures = 0.05, 0
                    self._on_connect()
                    while True:
                        # Notices that come while the probe runs wait in psycopg's backlog.
                        async for notice in conn.notifies(timeout=PROBE_EVERY_S):
                            self._dispatch(notice.channel, notice.payload)
                        await _probe(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "listener: %s; reconnecting in %.2fs", fault(exc), backoff,
                    exc_info=traceback_unless_expected(exc),
                    extra={"event": "listener_reconnecting"},
                )  # fmt: skip
            self.healthy, self.backend_pid = False, None
            failures += 1
            if self._on_disconnect is not None:
                self._on_disconnect()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
        if not self.stopping:
            await self._poll_instead()

    async def _poll_instead(self) -> None:
        """Say once that this worker polls, then idle until stopped (nothing failed)."""
        self.polling_only, self.healthy = True, True
        logger.warning(
            "listener: %s goes through a connection pooler (PgBouncer?), where LISTEN "
            "loses notices; polling instead (wake-ups wait up to poll_interval_ms). Give "
            "listen_url= (awa worker --listen-url) a direct connection to PostgreSQL for "
            "instant wake-ups", self._url_name,
            extra={"event": "listener_polling"},
        )  # fmt: skip
        await asyncio.Event().wait()  # until stop() cancels it

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == AVAILABLE_CHANNEL:
            self._on_available(payload)
            return
        if channel == self._handoff_channel and self._on_handoff is not None:
            self._on_handoff(payload)
            return
        try:
            message = json.loads(payload)
        except ValueError:
            logger.debug("listener: ignoring malformed control payload %r", payload)
            return
        if isinstance(message, dict):
            self._on_control(message)


async def _probe(conn: AsyncConnection[Any]) -> None:
    """Raise :class:`ListenerSilent` unless ``conn`` answers a ``SELECT 1`` in time."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await conn.execute("SELECT 1")
    except TimeoutError:
        raise ListenerSilent(
            f"the LISTEN connection did not answer a probe within {PROBE_TIMEOUT_S:.0f} s "
            "(a silent network path?)"
        ) from None
