"""Hostile paths and redirect targets against a running ``awa serve``: a queue name no
queue can have is a 404 page (not a 500), and an action's ``next`` never sends the
browser to another site."""

from __future__ import annotations

from collections.abc import Iterator
from http.cookies import SimpleCookie

import pytest

from tests.acceptance.support import http, http_response, start_serve, stop_serve


@pytest.fixture
def base(database_url: str) -> Iterator[str]:
    proc, url = start_serve(database_url)
    try:
        yield url
    finally:
        stop_serve(proc)


@pytest.mark.parametrize("path", ["queues/" + "q" * 300, "queues/%00", "queues/a%00b"])
def test_an_impossible_queue_name_is_not_found(base: str, path: str) -> None:
    status, body = http(base + path)
    assert status == 404, body[:300]
    assert "no such queue" in body


def _csrf(base: str) -> str:
    status, _, headers = http_response(base)
    assert status == 200
    cookie = SimpleCookie(headers["set-cookie"])
    return cookie["awa_csrf"].value


@pytest.mark.parametrize(
    "target",
    ["/\t/evil.example", "/\n/evil.example", "//evil.example", "/\\evil.example",
     "https://evil.example/"],
)  # fmt: skip
def test_next_never_redirects_off_site(base: str, target: str) -> None:
    token = _csrf(base)
    headers = {"Cookie": f"awa_csrf={token}", "X-CSRF-Token": token}
    form = {"queue": "email", "next": target}
    status, _, got = http_response(
        base + "actions/queue/resume", data=form, headers={**headers, "HX-Request": "true"}
    )
    assert (status, got.get("hx-redirect")) == (200, "/queues/email")
    status, _, got = http_response(base + "actions/queue/resume", data=form, headers=headers)
    assert (status, got.get("location")) == (303, "/queues/email")


def test_a_local_next_is_followed(base: str) -> None:
    token = _csrf(base)
    headers = {"Cookie": f"awa_csrf={token}", "X-CSRF-Token": token, "HX-Request": "true"}
    form = {"queue": "email", "next": "/jobs?queue=email"}
    status, _, got = http_response(base + "actions/queue/resume", data=form, headers=headers)
    assert (status, got.get("hx-redirect")) == (200, "/jobs?queue=email")
