"""Starlette and FastAPI: a lifespan that opens the client and can run a worker in the
web process, and a dependency that hands handlers the client.

::

    client = awa.AsyncClient()
    app = FastAPI(lifespan=awa.contrib.starlette.lifespan(client, worker=True))

    @app.post("/signups")
    async def signup(email: str, awa_client: AwaClient) -> dict[str, int]:
        job = await awa_client.insert(SendWelcome(email))
        return {"job": job.id}

Composing with a lifespan of your own: ``async with running(client, worker=True): ...``
inside it. See ``docs/integrations/fastapi.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from awa.extras import require

require("fastapi", "awa.contrib.starlette")

from starlette.requests import Request  # noqa: E402 - after the check that names the extra

from awa.client.async_client import AsyncClient  # noqa: E402
from awa.config import QueueSpec  # noqa: E402
from awa.errors import ValidationError  # noqa: E402

STATE_KEY = "awa"


@asynccontextmanager
async def running(
    client: AsyncClient,
    *,
    worker: bool = False,
    queues: Iterable[QueueSpec] | None = None,
    migrate: bool = False,
    shutdown_timeout_ms: int = 5_000,
    **start_options: Any,
) -> AsyncIterator[AsyncClient]:
    """Open ``client`` (failing now if the database cannot be reached), optionally apply
    migrations and start a worker in this event loop; on exit, shut the worker down
    gracefully and close the client. ``queues`` and ``start_options`` go to ``start()``.
    """
    if not isinstance(client, AsyncClient):
        raise ValidationError(
            "client", f"expected an awa.AsyncClient (async apps), got {type(client).__name__}"
        )
    if not worker and (queues is not None or start_options):
        raise ValidationError("worker", "queues and worker settings need worker=True")
    await client.__aenter__()
    try:
        if migrate:
            await client.migrate()
        if worker:
            await client.start(queues, **start_options)
        yield client
    finally:
        if worker:
            await client.shutdown(timeout_ms=shutdown_timeout_ms)
        await client.close()


def lifespan(
    client: AsyncClient, **options: Any
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan for ``Starlette(lifespan=...)`` / ``FastAPI(lifespan=...)`` running
    :func:`running` (same options); handlers find the client as ``request.state.awa``."""
    if not isinstance(client, AsyncClient):
        raise ValidationError(
            "client", f"expected an awa.AsyncClient (async apps), got {type(client).__name__}"
        )

    @asynccontextmanager
    async def app_lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
        async with running(client, **options) as opened:
            yield {STATE_KEY: opened}

    return app_lifespan


def client_of(request: Request) -> AsyncClient:
    """The client :func:`lifespan` opened, from a request (a FastAPI dependency too)."""
    client = getattr(request.state, STATE_KEY, None)
    if not isinstance(client, AsyncClient):
        raise RuntimeError("no awa client on this app: use awa.contrib.starlette.lifespan()")
    return client


__all__ = ["client_of", "lifespan", "running"]
