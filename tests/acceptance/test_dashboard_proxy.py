"""The dashboard behind a TLS reverse proxy on the same host: a real nginx (Debian's),
started by the test with a self-signed certificate, in front of ``awa serve``.

Both ways nginx is commonly set up: passing the browser's ``Host`` on
(``proxy_set_header Host $http_host``) and rewriting it to the upstream's (nginx's
default). Either way every page loads, an action from the public origin works, a foreign
origin is still refused, and cookies are ``Secure``. Without ``--public-url`` the first
answered 400 to every page and the second 403 to every action, and cookies lacked
``Secure``. nginx comes from apt (``make test`` and ``.ci/run`` install it); where it
cannot be installed these tests skip, saying so.
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.acceptance.support import http_response, start_serve, stop_serve

PUBLIC_HOST = "dash.example.test"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)

KEPT_HOST = "proxy_set_header Host $http_host;"
REWRITTEN_HOST = ""  # nginx's default: Host is the upstream's ($proxy_host)

NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name {host};
        ssl_certificate {dir}/cert.pem;
        ssl_certificate_key {dir}/key.pem;
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            {host_line}
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"""


@dataclass
class Proxied:
    """The dashboard as a browser reaches it through nginx."""

    url: str  # https://127.0.0.1:PORT/ (what we connect to)
    host: str  # dash.example.test:PORT (the Host and origin a browser would use)
    port: int
    mode: str  # "kept Host" or "rewritten Host"
    context: ssl.SSLContext

    @property
    def origin(self) -> str:
        return f"https://{self.host}"

    def request(
        self,
        path: str = "",
        *,
        data: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str, Any]:
        """(status, body, headers) through nginx, with the public Host; no redirects."""
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(
            self.url + path, data=body, headers={"Host": self.host, **(headers or {})}
        )
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self.context), _NoRedirect
        )
        try:
            with opener.open(request, timeout=20) as response:
                return response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _certificate(directory: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not found (needed for the proxy's self-signed certificate)")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={PUBLIC_HOST}", "-addext", f"subjectAltName=DNS:{PUBLIC_HOST}",
         "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip


def _wait_listening(port: int, nginx: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if nginx.poll() is not None:
            raise AssertionError(f"nginx exited: {log.read_text() if log.exists() else ''}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("nginx did not listen within 20 s")


@pytest.fixture(params=["kept Host", "rewritten Host"])
def proxied(request: Any, database_url: str, tmp_path: Path) -> Iterator[Proxied]:
    if NGINX is None:
        pytest.skip("nginx not installed: apt-get install -y nginx (make test installs it)")
    _certificate(tmp_path)
    for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(0o777)  # nginx's workers may run as another user
    port = _free_port()
    public = f"{PUBLIC_HOST}:{port}"
    serve, upstream = start_serve(
        database_url, "--public-url", f"https://{public}", "--forwarded-allow-ips", "127.0.0.1"
    )
    host_line = KEPT_HOST if request.param == "kept Host" else REWRITTEN_HOST
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp_path, port=port, host=PUBLIC_HOST,
                                      upstream=urllib.parse.urlsplit(upstream).port,
                                      host_line=host_line))  # fmt: skip
    nginx = subprocess.Popen(
        [NGINX, "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(conf),
         "-g", "daemon off;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait_listening(port, nginx, tmp_path / "error.log")
        context = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
        context.check_hostname = False  # we connect to 127.0.0.1; the certificate names the host
        yield Proxied(f"https://127.0.0.1:{port}/", public, port, request.param, context)
    finally:
        nginx.terminate()
        nginx.communicate(timeout=20)
        stop_serve(serve)


def _cookie(headers: Any, name: str) -> str:
    """The raw Set-Cookie header that sets ``name``."""
    for value in headers.get_all("set-cookie") or []:
        if re.match(rf"{name}_[0-9a-f]{{8}}=", value):  # tagged with the dashboard's address
            return str(value)
    raise AssertionError(f"no {name} cookie in {headers.get_all('set-cookie')}")


def _paused(url: str, queue: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT paused FROM awa.queue_meta WHERE queue = %s", (queue,))
        found = row.fetchone()
    return bool(found and found[0])


def test_pages_actions_and_secure_cookies_behind_nginx(proxied: Proxied, database_url: str) -> None:
    status, body, headers = proxied.request()
    assert status == 200, body[:200]
    set_csrf = _cookie(headers, "awa_csrf")
    assert "Secure" in set_csrf and "HttpOnly" in set_csrf
    ((name, morsel),) = SimpleCookie(set_csrf).items()
    token = morsel.value
    for page in ("jobs", "runtime", "queues/email"):
        assert proxied.request(page)[0] == 200, page
    csrf = {"Cookie": f"{name}={token}", "X-CSRF-Token": token, "HX-Request": "true"}
    status, body, headers = proxied.request(
        "actions/queue/pause", data={"queue": "email"},
        headers={**csrf, "Origin": proxied.origin},
    )  # fmt: skip
    assert (status, headers.get("hx-redirect")) == (200, "/queues/email"), body[:200]
    assert _paused(database_url, "email")
    # An action from any other origin is still refused.
    status, _, _ = proxied.request(
        "actions/queue/resume", data={"queue": "email"},
        headers={**csrf, "Origin": "https://evil.example"},
    )  # fmt: skip
    assert status == 403 and _paused(database_url, "email")
    status, _, headers = proxied.request(
        "actions/operator", data={"operator": "ada"}, headers={**csrf, "Origin": proxied.origin}
    )
    assert status == 200 and "Secure" in _cookie(headers, "awa_operator")


def test_a_foreign_host_is_still_refused_behind_nginx(proxied: Proxied) -> None:
    """With the browser's Host passed on, a request naming another host (DNS rebinding)
    gets 400; with Host rewritten, the dashboard only ever sees the upstream's."""
    status, _, _ = proxied.request(headers={"Host": f"attacker.example:{proxied.port}"})
    assert status == (400 if proxied.mode == "kept Host" else 200)


def test_forwarded_headers_are_believed_only_from_named_proxies(database_url: str) -> None:
    """Without --forwarded-allow-ips, a local client's X-Forwarded-Proto does not make a
    plain http request https (no Secure cookie a browser would then drop)."""
    serve, base = start_serve(database_url)
    try:
        status, _, headers = http_response(base, headers={"X-Forwarded-Proto": "https"})
        assert status == 200
        assert "Secure" not in headers["set-cookie"]
    finally:
        stop_serve(serve)
