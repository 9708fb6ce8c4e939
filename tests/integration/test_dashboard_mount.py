"""The web dashboard mounted under a path of a FastAPI app (awa.contrib.starlette):
every page, link, form, asset and redirect stays under the mount point, actions work,
and the dashboard's start-up and shutdown ride on the app's lifespan."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from starlette.testclient import TestClient

import awa
import awa.dashboard
from awa.contrib.starlette import mount_dashboard
from tests.helpers import wait_until

PREFIX = "/ops/awa"
URL_ATTRIBUTES = re.compile(r'\b(?:href|src|action|hx-get|hx-post)="([^"]*)"')


def _seed(database_url: str) -> int:
    async def seed() -> int:
        async with awa.AsyncClient(database_url, max_connections=1) as client:
            return (await client.insert({"to": "ada"}, kind="send", queue="mail")).id

    return asyncio.run(seed())


def _app(database_url: str, **options: object) -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def home() -> dict[str, str]:
        return {"app": "mine"}

    mount_dashboard(app, PREFIX, database_url=database_url, **options)  # type: ignore[arg-type]
    return app


def test_pages_links_and_actions_stay_under_the_mount_point(database_url: str) -> None:
    job_id = _seed(database_url)
    with TestClient(_app(database_url, token=None)) as http:
        assert http.get("/").json() == {"app": "mine"}  # the app's own routes are untouched
        pages = ["/", "/jobs", "/queues/mail", f"/jobs/{job_id}", "/runtime", "/audit"]
        for page in pages:
            response = http.get(PREFIX + page)
            assert response.status_code == 200, page
            urls = [u for u in URL_ATTRIBUTES.findall(response.text) if u.startswith("/")]
            assert urls, page
            assert [u for u in urls if not u.startswith(PREFIX + "/")] == [], page
        assert http.get(PREFIX + "/static/dashboard.css").status_code == 200

        queue_page = http.get(PREFIX + "/queues/mail").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', queue_page)
        assert csrf is not None
        paused = http.post(
            PREFIX + "/actions/queue/pause",
            data={"csrf_token": csrf.group(1), "queue": "mail"},
            follow_redirects=False,
        )
        assert paused.status_code == 303
        assert paused.headers["location"] == PREFIX + "/queues/mail"
        assert "paused" in http.get(PREFIX + "/").text

    async def is_paused() -> bool:
        async with awa.AsyncClient(database_url, max_connections=1) as client:
            (stat,) = [s for s in await client.queue_stats() if s.queue == "mail"]
            return stat.paused

    assert asyncio.run(is_paused())


def test_a_token_guards_the_mounted_dashboard_only(database_url: str) -> None:
    with TestClient(_app(database_url, token="s3cret", read_only=True)) as http:
        assert http.get("/").status_code == 200
        refused = http.get(PREFIX + "/jobs")
        assert refused.status_code == 401
        assert f'href="{PREFIX}/static/dashboard.css"' in refused.text
        login = http.get(PREFIX + "/jobs?token=s3cret", follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == PREFIX + "/jobs"
        assert http.get(PREFIX + "/jobs").status_code == 200  # the session cookie
        assert http.post(PREFIX + "/actions/queue/pause", data={}).status_code == 403


def test_templates_build_every_local_url_from_the_mount_root() -> None:
    # A literal "/…" would leave the mount point: write "{{ root }}/…" instead.
    templates = Path(awa.dashboard.__file__).parent / "templates"
    literal = re.compile(r'\b(?:href|src|action|hx-get|hx-post)="/')
    offending = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(templates.glob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if literal.search(line)
    ]
    assert offending == []


@pytest.mark.parametrize("path", ["/", "awa", "//awa", ""])
def test_a_mount_path_must_be_a_sub_path(database_url: str, path: str) -> None:
    with pytest.raises(awa.ValidationError, match="path: must be a sub-path"):
        mount_dashboard(FastAPI(), path, token=None, database_url=database_url)


def test_the_app_serves_a_second_lifespan_on_another_loop(database_url: str) -> None:
    # One app shared by several tests: each TestClient runs the lifespan on a loop of
    # its own, and the dashboard's sampler must keep sampling in the second one too.
    app = _app(database_url, token=None)
    mounted = next(route.app for route in app.routes if getattr(route, "path", "") == PREFIX)
    for _ in range(2):
        with TestClient(app) as http:
            assert http.get(PREFIX + "/").status_code == 200
            sampler = mounted.state.dashboard.sampler
            before = sampler.ticks
            sampler.kick()
            wait_until(lambda s=sampler, n=before: s.ticks > n and s.alive)
            assert http.get(PREFIX + "/jobs").status_code == 200
            assert "awa_queue_depth" in http.get(PREFIX + "/metrics").text


def test_a_queue_named_with_a_dot_dot_segment_keeps_its_own_page(database_url: str) -> None:
    """A queue named ``reports/../billing`` (sent as ``reports%2F..%2Fbilling``): the live
    refresh, the forms' ``next`` and the login redirect used the decoded path, which the
    browser resolved to ``/queues/billing`` — another queue's page and buttons (a
    security review)."""
    with awa.Client(database_url) as client:
        client.insert({}, kind="k", queue="reports/../billing")
    page = PREFIX + "/queues/reports%2F..%2Fbilling"
    with TestClient(_app(database_url, token="s3cret")) as http:
        login = http.get(page + "?token=s3cret", follow_redirects=False)
        assert login.headers["location"] == page
        body = http.get(page).text
    assert f'hx-get="{page}?fragment=live"' in body
    assert f'name="next" value="{page}"' in body
    assert "/queues/reports/../billing" not in body


def test_the_login_form_posts_the_token_in_its_body(database_url: str) -> None:
    """The form sent the token as a GET query: it landed in the access log of the
    application's server or a reverse proxy (a security review)."""
    with TestClient(_app(database_url, token="s3cret")) as http:
        page = http.get(PREFIX + "/jobs")
        assert page.status_code == 401 and '<form method="post"' in page.text
        wrong = http.post(PREFIX + "/jobs", data={"token": "nope"}, follow_redirects=False)
        assert wrong.status_code == 401 and "not right" in wrong.text
        login = http.post(PREFIX + "/jobs", data={"token": "s3cret"}, follow_redirects=False)
        assert (login.status_code, login.headers["location"]) == (303, PREFIX + "/jobs")
        assert http.get(PREFIX + "/jobs").status_code == 200  # the session cookie
