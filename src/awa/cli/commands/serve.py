"""``awa serve`` — the web dashboard (awa.dashboard) on uvicorn.

Bound to 127.0.0.1 by default. A non-loopback ``--host`` needs an access token
(``--token`` or ``AWA_DASHBOARD_TOKEN``); without one the command refuses to start.
Behind a TLS reverse proxy: ``--public-url`` (where browsers reach it) and
``--forwarded-allow-ips`` (which proxies' ``X-Forwarded-Proto``/``-For`` to believe).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import awa
from awa.cli.args import positive_int, with_example
from awa.cli.database import database_url
from awa.cli.output import fail
from awa.extras import require

if TYPE_CHECKING:
    from awa.dashboard import DashboardSettings

TOKEN_ENV = "AWA_DASHBOARD_TOKEN"


def port_number(text: str) -> int:
    """A TCP port, 1–65535 (0 picks a free one and prints it)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def public_url(text: str) -> str:
    """``http(s)://host[:port]``, the root of a host: what browsers type to reach us."""
    parts = urlsplit(text.strip())
    try:
        parts.port  # noqa: B018 (parsing it is the check)
    except ValueError:
        raise argparse.ArgumentTypeError(f"has a bad port: {text!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"must be an http(s) URL such as https://dash.example.com, got {text!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise argparse.ArgumentTypeError(
            "must be the root of a host (no path, query or user): the dashboard is served at /"
        )
    return text.strip()


def forwarded_ips(text: str) -> str:
    """Comma-separated IP addresses or networks of trusted proxies, or ``*``."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("must name at least one address")
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not an IP address or network (or *)"
            ) from None
    return ",".join(items)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the web dashboard",
        **with_example(
            "Serve the web dashboard: queues, jobs, runtime instances, overrides and actions\n"
            "(pause/resume, set/clear overrides, retry/cancel), refreshing live.\n"
            "Bound to 127.0.0.1 unless --host says otherwise; a non-loopback host needs an\n"
            f"access token (--token or {TOKEN_ENV}). With a token every request needs it:\n"
            "open http://HOST:PORT/?token=T once (a cookie keeps it) or send\n"
            "'Authorization: Bearer T'. Every action also needs the page's CSRF token.\n"
            "--port 0 picks a free port; the URL is printed on stderr.",
            f"awa serve --port 8000\n  {TOKEN_ENV}=s3cret awa serve --host 0.0.0.0 --read-only\n"
            "  awa serve --public-url https://dash.example.com --forwarded-allow-ips 127.0.0.1"
            "   # behind nginx",
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port (default 8000)")
    p.add_argument("--token", help=f"access token (default: ${TOKEN_ENV}, which other users "
                   "cannot read in the process list); required off loopback")  # fmt: skip
    p.add_argument("--read-only", action="store_true", help="hide every action; POSTs get 403")
    p.add_argument("--refresh-ms", type=positive_int, default=2_000, metavar="MS",
                   help="how often pages refresh (default 2000)")  # fmt: skip
    p.add_argument("--sample-interval-ms", type=positive_int, default=5_000, metavar="MS",
                   help="how often the charts sample queue_stats() (default 5000)")  # fmt: skip
    p.add_argument("--public-url", type=public_url, metavar="URL",
                   help="where browsers reach the dashboard through a reverse proxy, e.g. "
                   "https://dash.example.com: its host passes the Host check, its origin "
                   "the Origin check, and https makes cookies Secure")  # fmt: skip
    p.add_argument("--forwarded-allow-ips", type=forwarded_ips, metavar="IPS",
                   help="comma-separated addresses of trusted reverse proxies (or *): "
                   "their X-Forwarded-Proto and X-Forwarded-For are believed "
                   "(default: none)")  # fmt: skip
    p.set_defaults(handler=run, needs_db=lambda a: False)


def _configure_logging() -> None:
    """Audit lines (``awa.dashboard`` at INFO) go to stderr."""
    log = logging.getLogger("awa")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


async def run(args: argparse.Namespace, url: str | None) -> int:
    require("dashboard", "awa serve")
    from awa.dashboard import DashboardSettings  # imported only by this command
    from awa.dashboard.security import is_loopback

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        return fail("argument --token: must not be empty", 2)
    if not is_loopback(args.host) and not token:
        return fail(
            f"argument --host: {args.host} is not a loopback address; "
            f"set --token or {TOKEN_ENV} to serve the dashboard on it",
            2,
        )
    url = database_url(args.database_url)
    async with awa.AsyncClient(url, max_connections=1) as client:
        await client.check_schema()  # fail now, not on the first page view
    _configure_logging()
    settings = DashboardSettings(
        database_url=url,
        host=args.host,
        token=token,
        read_only=args.read_only,
        refresh_ms=args.refresh_ms,
        sample_interval_s=args.sample_interval_ms / 1000,
        public_url=args.public_url,
    )
    return await _serve(settings, args.port, args.forwarded_allow_ips)


async def _serve(settings: DashboardSettings, port: int, forwarded: str | None) -> int:
    import uvicorn

    from awa.dashboard import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=port,
        log_level="warning",
        access_log=False,  # the login URL carries ?token=; actions are audited instead
        lifespan="on",
        # X-Forwarded-* only from proxies the operator named (uvicorn would trust
        # 127.0.0.1 by default: any local process could claim https or another address).
        proxy_headers=forwarded is not None,
        forwarded_allow_ips=forwarded or "",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # wait for the bind to report the real port
        if task.done():
            await task
            return 1
        await asyncio.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    notes = [n for n, on in (("read-only", settings.read_only),
                             ("token required", settings.token)) if on]  # fmt: skip
    if settings.public_url:
        notes.append(f"public URL {settings.public_url}")
    sys.stderr.write(
        f"awa: dashboard on http://{host}:{bound}/" + (f" ({', '.join(notes)})" if notes else "")
        + "; Ctrl-C stops\n"
    )  # fmt: skip
    sys.stderr.flush()
    await task
    return 0
