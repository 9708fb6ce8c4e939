"""Access control for the dashboard: optional token, CSRF on every POST, read-only mode.

- **Token** (``--token`` / ``AWA_DASHBOARD_TOKEN``): every request but ``/static`` and
  ``/healthz`` needs it, as the session cookie set after ``?token=`` (the token is then
  dropped from the URL by a redirect), as ``Authorization: Bearer T`` or ``X-Awa-Token: T``.
  The cookie holds an HMAC of the token, never the token itself.
- **CSRF**: a signed double-submit token. The ``awa_csrf_<tag>`` cookie (HttpOnly,
  SameSite=Strict) carries ``nonce.signature``; every POST must echo the same value in the
  ``X-CSRF-Token`` header (htmx sends it) or the ``csrf_token`` form field, and carry no
  foreign ``Origin``. The signing key is random per process.
- **Read-only**: every request that is not GET or HEAD is refused with 403.
- **Host check** on loopback binds (DNS rebinding) and strict response headers (CSP
  without inline script, no framing, no caching).
- **Behind a reverse proxy** (``--public-url``): the public host passes the Host check
  (a proxy that keeps the browser's Host), the public origin passes the Origin check (a
  proxy that rewrites Host to the upstream's), and cookies are ``Secure`` when the
  request came over https — said by a trusted proxy's ``X-Forwarded-Proto``
  (``--forwarded-allow-ips``), or by the public host of an https public URL.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import quote, unquote, urlsplit

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp

SESSION_COOKIE = "awa_session"
CSRF_COOKIE = "awa_csrf"
OPERATOR_COOKIE = "awa_operator"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
TOKEN_HEADER = "x-awa-token"
OPEN_PATHS = ("/static/", "/healthz")
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def _without_controls(text: str) -> str:
    # Browsers drop tabs and newlines anywhere in a URL (WHATWG URL parsing), so
    # "/\t/evil.example" is followed as "//evil.example": another site.
    return "".join(ch for ch in text if ch >= " " and ch != "\x7f")


def local_path(path: str) -> str:
    """``path`` as a same-site path: ``//evil.example``, ``/\\evil.example`` or
    ``/\t/evil.example`` would leave the site when used as a link, a form action or a
    redirect."""
    return "/" + _without_controls(path).lstrip("/\\")


def request_path(request: Request) -> str:
    """The request's path as the browser sent it, percent-encoded: decoded, a queue named
    ``reports/../billing`` (sent as ``reports%2F..%2Fbilling``) read as a path the
    browser then resolved to ``/queues/billing`` — the live refresh, the ``next`` of a
    form and the login redirect showed and acted on another queue (a review)."""
    decoded = request.url.path
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        sent = raw.decode("latin-1")
        if unquote(sent) == decoded:
            return sent
        if decoded.endswith(unquote(sent)):  # behind a prefix the server added
            return quote(decoded[: len(decoded) - len(unquote(sent))]) + sent
    return quote(decoded)


def local_redirect(target: object) -> str | None:
    """``target`` if it is a path on this site that every browser reads the same way,
    else None: no scheme, no host, no backslash, no control character."""
    if not isinstance(target, str) or not target.startswith("/"):
        return None
    if target != _without_controls(target) or "\\" in target or target.startswith("//"):
        return None
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else None


def route_path(request: Request) -> str:
    """The request's path inside the dashboard, without the path it is mounted at."""
    root = request.scope.get("root_path", "")
    path = request.url.path
    return path[len(root) :] if root and path.startswith(root) else path


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased, without a default port: the form
    a browser sends in ``Origin``."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    port = "" if parts.port in (None, default) else f":{parts.port}"
    return f"{scheme}://{host}{port}"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """Checks tokens and CSRF values; holds the per-process signing key."""

    def __init__(self, token: str | None, read_only: bool, public_url: str | None = None) -> None:
        self.token = token or None
        self.read_only = read_only
        self._key = secrets.token_bytes(32)
        self.public_origin = origin_of(public_url) if public_url else None
        public = urlsplit(public_url or "")
        self._public_https_host = (
            (public.hostname or "").lower() if public.scheme == "https" else ""
        )

    def secure(self, request: Request) -> bool:
        """True when the browser talks to us over https: cookies must then be ``Secure``."""
        if request.url.scheme == "https":  # direct, or a trusted proxy's X-Forwarded-Proto
            return True
        host = (request.url.hostname or "").lower()
        return bool(self._public_https_host) and host == self._public_https_host

    def origin_allowed(self, request: Request, origin: str | None) -> bool:
        """No Origin (not a browser's cross-site request), our public origin, or the origin
        of the Host this request was sent to."""
        if origin is None:
            return True
        if self.public_origin is not None and origin_of(origin) == self.public_origin:
            return True
        return urlsplit(origin).netloc == request.headers.get("host")

    # -- token ------------------------------------------------------------------------

    def session_value(self) -> str:
        """What the session cookie holds: an HMAC of the token (never the token)."""
        assert self.token is not None
        return hmac.new(self.token.encode(), b"awa-dashboard-session", hashlib.sha256).hexdigest()

    def token_matches(self, supplied: str) -> bool:
        """Constant-time comparison with the configured token."""
        return self.token is not None and hmac.compare_digest(
            supplied.encode(), self.token.encode()
        )

    def authenticated(self, request: Request) -> bool:
        """True when no token is configured or the request carries it."""
        if self.token is None:
            return True
        cookie = request.cookies.get(cookie_name(request, SESSION_COOKIE), "")
        if cookie and hmac.compare_digest(cookie.encode(), self.session_value().encode()):
            return True
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and self.token_matches(header[7:].strip()):
            return True
        return self.token_matches(request.headers.get(TOKEN_HEADER, "\0"))

    # -- CSRF -------------------------------------------------------------------------

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode(), hashlib.sha256).hexdigest()

    def new_csrf(self) -> str:
        """A fresh ``nonce.signature`` value."""
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(nonce)}"

    def csrf_signed(self, value: str) -> bool:
        """True when ``value`` was issued by this process."""
        nonce, _, signature = value.partition(".")
        return bool(nonce) and hmac.compare_digest(signature.encode(), self._sign(nonce).encode())

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        """The cookie is ours and the request echoes it, from our own origin."""
        cookie = request.cookies.get(cookie_name(request, CSRF_COOKIE), "")
        if not submitted or not cookie or not self.csrf_signed(cookie):
            return False
        if not hmac.compare_digest(cookie.encode(), submitted.encode()):
            return False
        return self.origin_allowed(request, request.headers.get("origin"))


def cookie_name(request: Request, base: str) -> str:
    """``base`` plus a tag of this dashboard's address (host, port, mount path).

    Browsers share cookies between the ports of a host: two dashboards there (prod on
    8000, staging on 8001) replaced each other's CSRF cookie, signed with another key, on
    every page and live refresh, so actions failed with 403, and one's login logged the
    other out (a review). The tag keeps their cookies apart."""
    where = f"{request.url.netloc}{request.scope.get('root_path', '')}"
    return f"{base}_{hashlib.sha256(where.encode()).hexdigest()[:8]}"


LoginPage = Callable[[Request, str], Response]


class GuardMiddleware(BaseHTTPMiddleware):
    """Applies :class:`Guard` to every request and adds the security headers."""

    def __init__(
        self, app: ASGIApp, guard: Guard, login_page: LoginPage, allowed_hosts: frozenset[str]
    ) -> None:
        super().__init__(app)
        self.guard = guard
        self.login_page = login_page
        self.allowed_hosts = allowed_hosts

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await self._dispatch(request, call_next)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        host = (request.url.hostname or "").lower()
        if self.allowed_hosts and host not in self.allowed_hosts:
            return PlainTextResponse("unexpected Host header", status_code=400)
        if route_path(request).startswith(OPEN_PATHS):
            return await call_next(request)
        guard = self.guard
        if guard.token is not None:
            supplied = request.query_params.get("token")
            if supplied is not None:
                return self._login(request, supplied)
            if not guard.authenticated(request):
                if request.method == "POST":  # the login form: the token in its body
                    posted = (await request.form()).get("token")
                    if isinstance(posted, str):
                        return self._login(request, posted)
                return self.login_page(request, "This dashboard needs its access token.")
        if guard.read_only and request.method not in ("GET", "HEAD"):
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        cookie = request.cookies.get(cookie_name(request, CSRF_COOKIE), "")
        fresh = not guard.csrf_signed(cookie) if cookie else True
        request.state.csrf = guard.new_csrf() if fresh else cookie
        response = await call_next(request)
        if fresh:
            response.set_cookie(
                cookie_name(request, CSRF_COOKIE), request.state.csrf, httponly=True,
                samesite="strict",
                secure=guard.secure(request),
            )  # fmt: skip
        return response

    def _login(self, request: Request, supplied: str) -> Response:
        if request.method not in ("GET", "POST") or not self.guard.token_matches(supplied):
            return self.login_page(request, "That token is not right.")
        query = request.url.remove_query_params("token").query
        target = local_path(request_path(request)) + (f"?{query}" if query else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            cookie_name(request, SESSION_COOKIE), self.guard.session_value(), httponly=True,
            samesite="lax",
            secure=self.guard.secure(request),
        )  # fmt: skip
        return response
