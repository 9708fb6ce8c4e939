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
inside it. ``mount_dashboard(app, "/awa", token=...)`` serves the web dashboard inside
the app. See ``docs/integrations/fastapi.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from awa.extras import require

require("fastapi", "awa.contrib.starlette")

from starlette.requests import Request  # noqa: E402 - after the check that names the extra

from awa import validate  # noqa: E402
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


def mount_dashboard(
    app: Any,
    path: str = "/awa",
    *,
    token: str | None,
    read_only: bool = False,
    database_url: str | None = None,
    refresh_ms: int = 2_000,
    sample_interval_ms: int = 5_000,
) -> Any:
    """Mount the web dashboard (``awa serve``'s pages and actions) at ``path`` of a
    FastAPI or Starlette ``app``; returns the mounted dashboard app.

    ``token`` is required as a keyword so the choice is explicit: a string asks every
    request for it (as ``awa serve --token``); ``None`` leaves access control to the
    app (its middleware runs for mounted routes too). The dashboard's own start-up and
    shutdown (its client, the chart sampler) join the app's lifespan.
    """
    require("dashboard", "mount_dashboard")
    from awa.dashboard import DashboardSettings, create_app

    if not isinstance(path, str) or not path.startswith("/") or path == "/" or "//" in path:
        raise ValidationError("path", f"must be a sub-path like '/awa', got {path!r}")
    settings = DashboardSettings(
        database_url=database_url,
        # Served by the app's own server: no loopback bind, so no loopback Host check;
        # the app decides who reaches this path.
        host="0.0.0.0",
        token=token,
        read_only=read_only,
        refresh_ms=validate.integer("refresh_ms", refresh_ms, low=1),
        sample_interval_s=validate.integer("sample_interval_ms", sample_interval_ms, low=1) / 1000,
    )
    dashboard = create_app(settings)
    app.mount(path.rstrip("/"), dashboard)
    # Starlette runs only the outermost app's lifespan: chain the dashboard's into it.
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def with_dashboard(app_: Any) -> AsyncIterator[Any]:
        async with dashboard.router.lifespan_context(dashboard), outer(app_) as state:
            yield state

    app.router.lifespan_context = with_dashboard
    return dashboard


__all__ = ["client_of", "lifespan", "mount_dashboard", "running"]
