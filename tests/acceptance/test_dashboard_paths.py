"""Hostile paths and redirect targets against a running ``awa serve``: a queue name no
queue can have is a 404 page (not a 500), and an action's ``next`` never sends the
browser to another site."""

from __future__ import annotations

from collections.abc import Iterator
from http.cookies import SimpleCookie

import pytest

import awa
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


def _csrf(base: str) -> dict[str, str]:
    """The headers of an action: this dashboard's CSRF cookie, echoed."""
    status, _, headers = http_response(base)
    assert status == 200
    ((name, morsel),) = SimpleCookie(headers["set-cookie"]).items()
    assert name.startswith("awa_csrf_")
    return {"Cookie": f"{name}={morsel.value}", "X-CSRF-Token": morsel.value}


@pytest.mark.parametrize(
    "target",
    ["/\t/evil.example", "/\n/evil.example", "//evil.example", "/\\evil.example",
     "https://evil.example/"],
)  # fmt: skip
def test_next_never_redirects_off_site(base: str, target: str) -> None:
    headers = _csrf(base)
    form = {"queue": "email", "next": target}
    status, _, got = http_response(
        base + "actions/queue/resume", data=form, headers={**headers, "HX-Request": "true"}
    )
    assert (status, got.get("hx-redirect")) == (200, "/queues/email")
    status, _, got = http_response(base + "actions/queue/resume", data=form, headers=headers)
    assert (status, got.get("location")) == (303, "/queues/email")


def test_a_local_next_is_followed(base: str) -> None:
    headers = {**_csrf(base), "HX-Request": "true"}
    form = {"queue": "email", "next": "/jobs?queue=email"}
    status, _, got = http_response(base + "actions/queue/resume", data=form, headers=headers)
    assert (status, got.get("hx-redirect")) == (200, "/jobs?queue=email")


def test_a_queue_named_like_a_path_links_to_its_own_page(base: str, database_url: str) -> None:
    """Links kept '/': 'reports/../billing' resolved in the browser to billing's page,
    whose buttons act on billing (a review)."""
    with awa.Client(database_url) as client:
        client.insert({}, kind="k", queue="reports/../billing")
    status, body = http(base)
    assert status == 200 and 'href="/queues/reports%2F..%2Fbilling"' in body
    status, body = http(base + "queues/reports%2F..%2Fbilling")
    assert status == 200 and "reports/../billing" in body
