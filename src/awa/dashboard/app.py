"""The Starlette application: settings, shared state, rendering and the route table."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlencode, urlsplit

from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

import awa
import awa.metrics as awa_metrics
from awa.dashboard.audit import AuditLog
from awa.dashboard.samples import Sampler
from awa.dashboard.security import (
    CSRF_FIELD,
    LOOPBACK_NAMES,
    OPERATOR_COOKIE,
    SECURITY_HEADERS,
    Guard,
    GuardMiddleware,
    cookie_name,
    is_loopback,
    local_path,
    request_path,
)

HERE = Path(__file__).parent
PAGE_POOL_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """How ``awa serve`` runs the dashboard."""

    database_url: str | None = None
    host: str = "127.0.0.1"
    token: str | None = None
    read_only: bool = False
    refresh_ms: int = 2_000
    sample_interval_s: float = 5.0
    public_url: str | None = None  # where browsers reach it through a reverse proxy


class Dashboard:
    """What every handler shares: the client, the sampler, the audit log and the guard."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self._connect()
        self._closed = False
        self.audit = AuditLog()
        self.guard = Guard(settings.token, settings.read_only, settings.public_url)
        self.batch_tasks: set[asyncio.Task[Any]] = set()  # operations applied from here
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.filters.update(ts=_ts, ago=_ago, seconds=_seconds, num=_num, pretty=_pretty,
                           segment=path_segment, raw=as_typed)  # fmt: skip
        env.finalize = shown

    def _connect(self) -> None:
        self.client = awa.AsyncClient(self.settings.database_url, max_connections=4)
        # A page waits this long for a connection, not a worker's 30 s: with the database
        # down, the operator sees "did not answer" while still looking at the tab.
        self.client.pool_timeout_s = PAGE_POOL_TIMEOUT_S
        self.sampler = Sampler(self.client, self.settings.sample_interval_s)

    def open(self) -> None:
        """Start a lifespan: after an earlier one closed them, a client and a sampler of
        this event loop (an app served again, or entered twice by test clients, gets a
        new loop; the old one's pool and locks cannot be used from it)."""
        if self._closed:
            self._connect()
            self._closed = False
        self.sampler.start()

    async def close(self) -> None:
        """End a lifespan: the sampler, the batches applied from here, the client."""
        await self.sampler.stop()
        await self.stop_batches()
        await self.client.close()
        self._closed = True

    def render(
        self,
        request: Request,
        name: str,
        context: Mapping[str, Any] | None = None,
        status_code: int = 200,
    ) -> Response:
        """A template with the common context (CSRF value, operator, mode, recent actions)."""
        base = {
            "csrf": getattr(request.state, "csrf", ""),
            "csrf_field": CSRF_FIELD,
            "csrf_headers": json.dumps({"X-CSRF-Token": getattr(request.state, "csrf", "")}),
            "read_only": self.settings.read_only,
            "token_mode": self.settings.token is not None,
            "operator": request.cookies.get(cookie_name(request, OPERATOR_COOKIE), ""),
            "refresh_ms": self.settings.refresh_ms,
            "version": awa.__version__,
            "path": local_path(request_path(request)),
            "root": mount_root(request),
            "live_url": live_url(request),
            **(context or {}),
        }
        return self.templates.TemplateResponse(request, name, base, status_code=status_code)

    def page(self, request: Request, page: str, live: str, context: Mapping[str, Any]) -> Response:
        """The whole page, or only its live part when htmx polls it (``?fragment=live``)."""
        name = live if request.query_params.get("fragment") == "live" else page
        return self.render(request, name, context)

    def run_batch(self, operation_id: int) -> None:
        """Carry a batch operation out in the background of this process."""
        task = asyncio.create_task(self.client.run_batch(operation_id))
        self.batch_tasks.add(task)
        task.add_done_callback(self.batch_tasks.discard)

    async def stop_batches(self) -> None:
        """At shutdown: stop running operations here (they stay open; a worker's leader
        or `awa batch resume` carries them on)."""
        for task in list(self.batch_tasks):
            task.cancel()
        await asyncio.gather(*self.batch_tasks, return_exceptions=True)

    def login_page(self, request: Request, message: str) -> Response:
        """The 401 page asking for the access token."""
        return self.render(request, "login.html", {"message": message}, status_code=401)


def dashboard(request: Request) -> Dashboard:
    """The :class:`Dashboard` of the app serving ``request``."""
    return cast(Dashboard, request.app.state.dashboard)


def mount_root(request: Request) -> str:
    """The path the dashboard is mounted at in a larger app (``""`` when it is the app):
    every link, form and redirect starts with it."""
    return local_path(request.scope.get("root_path", "")).rstrip("/")


def live_url(request: Request) -> str:
    """This page's URL asking for its live fragment only."""
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "fragment"]
    return f"{local_path(request_path(request))}?{urlencode([*params, ('fragment', 'live')])}"


# Characters that reorder the text around them (bidirectional overrides, embeddings,
# isolates, marks): a queue named "\u202eliame" read "email", a second row beside the real
# one, in its pause confirmation and in the audit; an error ending in one reversed the
# sentence awa wrote after it, job id included (a review).
_BIDI_CONTROLS = dict.fromkeys(
    [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
_VISIBLE = {code: f"\\u{code:04x}" for code in _BIDI_CONTROLS}


def shown(value: Any) -> Any:
    """Every value a template writes, as it is shown (Jinja's ``finalize``): text with its
    bidirectional controls written out (``\\u202e``), so none reorders what a page says.
    A value marked with the ``raw`` filter (a form field's, posted back as it is) is kept."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return value.translate(_VISIBLE)
    return value


def as_typed(value: Any) -> Markup:
    """``value`` escaped but otherwise as it is (``{{ q.name | raw }}``): for the value of
    a form field, which goes back to the server and must name the very queue."""
    return escape(value)


def path_segment(value: object) -> str:
    """One path segment: Jinja's urlencode keeps '/', so a queue named 'reports/../billing'
    linked to /queues/billing, another queue's page with its buttons (a review)."""
    return quote(str(value), safe="")


def who(request: Request) -> str:
    """``name@address`` of the person acting (name from the "acting as" box)."""
    name = request.cookies.get(cookie_name(request, OPERATOR_COOKIE)) or "anonymous"
    return f"{name}@{request.client.host if request.client else 'unknown'}"


# -- template filters ---------------------------------------------------------------


def _ts(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _ago(value: datetime | None) -> str:
    if value is None:
        return "-"
    delta = (datetime.now(UTC) - value).total_seconds()
    return f"in {_seconds(-delta)}" if delta < -0.5 else f"{_seconds(max(0.0, delta))} ago"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return str(value)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


# -- the application ----------------------------------------------------------------


async def healthz(request: Request) -> Response:
    """Liveness for load balancers: no token needed, tells nothing about the queues."""
    health = await dashboard(request).client.health_check()
    ok = health.postgres_connected
    return JSONResponse({"ok": ok}, status_code=200 if ok else 503)


async def unavailable(request: Request, exc: Exception) -> Response:
    """A page that could not reach the database says so (503) instead of a bare 500; one
    the database refused for want of a privilege says that (403): a standing setting of
    the dashboard's role, not a moment to retry after."""
    cause = getattr(exc.__cause__, "sqlstate", None)
    if cause == INSUFFICIENT_PRIVILEGE:
        message = f"the dashboard's database role lacks a privilege: {exc}"
        return dashboard(request).render(request, "error.html", {"message": message}, 403)
    message = f"the database did not answer: {exc}"
    return dashboard(request).render(request, "error.html", {"message": message}, 503)


INSUFFICIENT_PRIVILEGE = "42501"


async def failed(request: Request, exc: Exception) -> Response:
    """Anything else (e.g. no pooled connection in time) as a page naming the error.

    Starlette answers an unhandled exception outside every middleware, so this page
    carries the security headers itself: the guard never sees it."""
    message = f"{type(exc).__name__}: {exc}"
    response = dashboard(request).render(request, "error.html", {"message": message}, 500)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class _LiveMetrics:
    """``/metrics`` of the client the dashboard holds now (each lifespan after the first
    builds its own, see :meth:`Dashboard.open`)."""

    def __init__(self, state: Dashboard) -> None:
        self._state = state
        self._client: awa.AsyncClient | None = None
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._client is not self._state.client:
            self._client = self._state.client
            self._app = awa_metrics.asgi_app(self._client)
        await self._app(scope, receive, send)


def create_app(settings: DashboardSettings | None = None) -> Starlette:
    """The dashboard as an ASGI app (``awa serve`` runs it with uvicorn)."""
    from awa.dashboard import actions, batches, pages  # the route modules import this one

    settings = settings or DashboardSettings()
    state = Dashboard(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.open()
        try:
            yield
        finally:
            await state.close()

    # On a loopback bind only loopback Host headers are served (no DNS rebinding), and
    # the public host when a reverse proxy passes the browser's Host on.
    allowed: set[str] = set()
    if is_loopback(settings.host):
        allowed = {*LOOPBACK_NAMES, settings.host.lower()}
        if settings.public_url:
            allowed.add((urlsplit(settings.public_url).hostname or "").lower())
    routes = [
        *pages.routes(),
        *actions.routes(),
        *batches.routes(),
        Route("/healthz", healthz),
        # Prometheus scrape of the queue gauges (depth, lag, pause); the workers' own
        # counters are on their --metrics-port. Behind the token like every page.
        Route("/metrics", _LiveMetrics(state), name="metrics"),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [
        Middleware(GuardMiddleware, guard=state.guard, login_page=state.login_page,
                   allowed_hosts=frozenset(allowed)),
    ]  # fmt: skip
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={awa.DatabaseError: unavailable, Exception: failed},
    )
    app.state.dashboard = state
    return app
