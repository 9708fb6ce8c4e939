"""The dashboard's fleet surfaces through its ASGI app on a real database: the queue page's
fleet limits and their form, the fleet pool page and its form, the overview's badges.

Every form POST carries the page's CSRF token as htmx does; a refused value must answer
400 with the API's own message and write nothing (no row, no audit entry).
"""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

import psycopg
import pytest

import awa
from awa.dashboard.app import DashboardSettings, create_app

Form = Sequence[tuple[str, str]]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str


class Site:
    """The dashboard app driven in-process, with the CSRF cookie a browser would hold."""

    def __init__(self, database_url: str, **settings: Any) -> None:
        self.app = create_app(DashboardSettings(database_url=database_url, **settings))
        self.csrf = ""
        self.csrf_cookie = ""

    @property
    def audit(self) -> list[Any]:
        return list(self.app.state.dashboard.audit.recent())

    async def request(
        self,
        method: str,
        path: str,
        form: Form | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        body = urllib.parse.urlencode(list(form or ())).encode()
        path, _, query = path.partition("?")
        sent_headers = [(b"host", b"127.0.0.1:8000")]
        if self.csrf:
            sent_headers.append((b"cookie", f"{self.csrf_cookie}={self.csrf}".encode()))
        if form is not None:
            sent_headers.append((b"content-type", b"application/x-www-form-urlencoded"))
        sent_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        scope = {
            "type": "http", "method": method, "path": path, "raw_path": path.encode(),
            "root_path": "", "scheme": "http", "query_string": query.encode(),
            "http_version": "1.1", "headers": sent_headers, "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8000), "app": self.app,
        }  # fmt: skip
        messages: list[dict[str, Any]] = []
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return pending.pop() if pending else {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            messages.append(dict(message))

        await self.app(scope, receive, send)
        start = next(m for m in messages if m["type"] == "http.response.start")
        got = {k.decode().lower(): v.decode() for k, v in start["headers"]}
        text = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        if "set-cookie" in got and got["set-cookie"].startswith("awa_csrf_"):
            ((self.csrf_cookie, morsel),) = SimpleCookie(got["set-cookie"]).items()
            self.csrf = morsel.value
        return Reply(start["status"], got, html.unescape(text.decode()))

    async def get(self, path: str) -> Reply:
        return await self.request("GET", path)

    async def post(self, path: str, form: Form, *, csrf: bool = True) -> Reply:
        if not self.csrf:
            await self.get("/")
        headers = {"HX-Request": "true"}
        if csrf:
            headers["X-CSRF-Token"] = self.csrf
        return await self.request("POST", path, form, headers)

    async def close(self) -> None:
        await self.app.state.dashboard.client.close()


@pytest.fixture
async def site(database_url: str) -> AsyncIterator[Site]:
    s = Site(database_url)
    try:
        yield s
    finally:
        await s.close()


def fleet_rows(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(
            tuple(conn.execute(f"SELECT * FROM awa.{table} ORDER BY 1").fetchall())
            for table in ("queue_limits", "queue_rate_buckets", "fleet_pool", "fleet_pool_members")
        )


# -- fleet limits on the queue page --------------------------------------------------


async def test_limits_form_sets_shows_and_clears(site: Site, client: awa.AsyncClient) -> None:
    await client.insert_many([{"tenant": "a"}] * 2, kind="k", queue="email")
    page = await site.get("/queues/email")
    assert page.status == 200 and "No fleet limits" in page.body and 'id="limits-form"' in page.body

    form = [("queue", "email"), ("concurrency", "10"), ("rate_limit", "2.5"), ("burst", ""),
            ("partition_by", "tenant")]  # fmt: skip
    reply = await site.post("/actions/queue/limits", form)
    assert (reply.status, reply.headers.get("hx-redirect")) == (200, "/queues/email")
    stored = await client.queue_limits("email")
    assert stored is not None
    assert (stored.concurrency, stored.rate_limit, stored.burst, stored.partition_by) == (
        10, 2.5, None, "tenant",
    )  # fmt: skip
    entry = site.audit[0]
    assert (entry.action, entry.target) == ("set fleet limits", "queue email")
    assert entry.detail == "concurrency=10, rate_limit=2.5, burst=-, partition_by=tenant"

    page = await site.get("/queues/email")
    assert 'data-limit="concurrency">10<' in page.body
    assert 'data-limit="partition_by">tenant<' in page.body
    assert 'id="fleet-running">0 of 10 per key<' in page.body
    assert "busiest tenant values" in page.body
    assert 'id="limit-concurrency"' in page.body and 'value="10"' in page.body  # prefilled
    overview = await site.get("/")
    assert 'data-badge="limits"' in overview.body and "cap 10 · 2.5/s · per tenant" in overview.body

    reply = await site.post("/actions/queue/limits/clear", [("queue", "email")])
    assert reply.status == 200
    assert await client.queue_limits("email") is None
    assert site.audit[0].action == "clear fleet limits"


async def test_an_all_empty_limits_form_clears_like_the_api(
    site: Site, client: awa.AsyncClient
) -> None:
    await client.set_queue_limits("email", concurrency=3)
    form = [("queue", "email"), ("concurrency", ""), ("rate_limit", " "), ("burst", ""),
            ("partition_by", "")]  # fmt: skip
    assert (await site.post("/actions/queue/limits", form)).status == 200
    assert await client.queue_limits("email") is None
    assert site.audit[0].detail == "none: cleared"


async def _api_message(client: awa.AsyncClient, **options: Any) -> str:
    with pytest.raises(awa.ValidationError) as caught:
        await client.set_queue_limits("email", **options)
    return str(caught.value)


@pytest.mark.parametrize(
    ("fields", "api_options", "field"),
    [
        ({"concurrency": "0"}, {"concurrency": 0}, "concurrency"),
        ({"concurrency": "-4"}, {"concurrency": -4}, "concurrency"),
        ({"rate_limit": "-3"}, {"rate_limit": -3.0}, "rate_limit"),
        ({"rate_limit": "nan"}, {"rate_limit": float("nan")}, "rate_limit"),
        ({"rate_limit": "1", "burst": "0"}, {"rate_limit": 1.0, "burst": 0}, "burst"),
        ({"burst": "3"}, {"burst": 3}, "burst"),
        ({"partition_by": "k" * 64}, {"partition_by": "k" * 64}, "partition_by"),
        ({"concurrency": "1.5"}, None, "concurrency"),
        ({"concurrency": "ten"}, None, "concurrency"),
        ({"rate_limit": "fast"}, None, "rate_limit"),
        ({"concurrency": "99999999999"}, None, "concurrency"),
    ],
)
async def test_a_bad_limit_shows_the_api_message_and_writes_nothing(
    site: Site,
    client: awa.AsyncClient,
    database_url: str,
    fields: dict[str, str],
    api_options: dict[str, Any] | None,
    field: str,
) -> None:
    await client.set_queue_limits("email", concurrency=2)
    before, audited = fleet_rows(database_url), len(site.audit)
    form = [("queue", "email"), ("concurrency", "2"), *fields.items()]
    reply = await site.post("/actions/queue/limits", list(dict(form).items()))
    assert reply.status == 400
    assert (reply.headers["hx-retarget"], reply.headers["hx-reswap"]) == ("#flash", "innerHTML")
    assert 'id="flash-error"' in reply.body and field in reply.body
    if api_options is not None:  # the API's own words, not a second wording
        assert await _api_message(client, **{"concurrency": 2, **api_options}) in reply.body
    assert fleet_rows(database_url) == before
    assert len(site.audit) == audited


async def test_limits_need_the_csrf_token_and_a_writable_dashboard(
    site: Site, client: awa.AsyncClient, database_url: str
) -> None:
    form = [("queue", "email"), ("concurrency", "4")]
    reply = await site.post("/actions/queue/limits", form, csrf=False)
    assert reply.status == 403 and "CSRF" in reply.body
    assert (await site.post("/actions/pool", [("total", "4")], csrf=False)).status == 403
    # The page's header token went stale (the cookie was renewed since); the form's field,
    # rendered by a later live refresh, matches the cookie: accepted. A stale field alone
    # is refused.
    await site.get("/")
    stale = {"HX-Request": "true", "X-CSRF-Token": site.csrf[::-1]}
    reply = await site.request(
        "POST", "/actions/pool", [("total", "4"), ("csrf_token", site.csrf)], stale
    )
    assert reply.status != 403
    reply = await site.request(
        "POST", "/actions/pool", [("total", "5"), ("csrf_token", "x")], stale
    )
    assert reply.status == 403
    read_only = Site(database_url, read_only=True)
    try:
        page = await read_only.get("/queues/email")
        assert 'id="limits-form"' not in page.body and "cannot be changed here" in page.body
        assert 'id="pool-form"' not in (await read_only.get("/pool")).body
        assert (await read_only.post("/actions/queue/limits", form)).status == 403
        assert (await read_only.post("/actions/pool/clear", [])).status == 403
    finally:
        await read_only.close()
    assert await client.queue_limits("email") is None
    assert await client.fleet_pool() is None and site.audit == []


# -- the fleet pool page -------------------------------------------------------------


def _pool_form(total: str, *rows: tuple[str, str, str]) -> list[tuple[str, str]]:
    form = [("total", total)]
    for name, low, weight in (*rows, ("", "", "")):  # the page always has blank rows
        form += [("member_queue", name), ("member_min", low), ("member_weight", weight)]
    return form


async def test_pool_form_sets_shows_and_clears(site: Site, client: awa.AsyncClient) -> None:
    page = await site.get("/pool")
    assert page.status == 200 and 'id="no-pool"' in page.body
    await client.insert_many([{}] * 3, kind="k", queue="reports")

    reply = await site.post(
        "/actions/pool", _pool_form("12", ("email", "4", "3"), ("reports", "", ""))
    )
    assert (reply.status, reply.headers.get("hx-redirect")) == (200, "/pool")
    pool = await client.fleet_pool()
    assert pool is not None and pool.total == 12
    assert pool.queues == {"email": awa.PoolMember(4, 3), "reports": awa.PoolMember(0, 1)}
    entry = site.audit[0]
    assert (entry.action, entry.target) == ("set fleet pool", "fleet pool")
    assert entry.detail == "total 12: email min 4 weight 3, reports min 0 weight 1"

    page = await site.get("/pool")
    assert 'id="pool-total-value">12<' in page.body and 'id="pool-running">0<' in page.body
    # Shares when both are busy: the 8 left by the minimums split 3:1 → email 4+6, reports 0+2.
    email = _row(page.body, "email")
    reports = _row(page.body, "reports")
    assert email == ["email", "4", "3", "0", "10", "0"]
    assert reports == ["reports", "0", "1", "0", "2", "3"]
    assert "set fleet pool" in page.body  # the pool's own audit list
    overview = await site.get("/")
    assert "fleet pool: 0 of 12 running" in overview.body and 'data-badge="pool"' in overview.body
    queue = await site.get("/queues/email")
    assert "Member of the" in queue.body and "min 4 · weight 3" in queue.body

    assert (await site.post("/actions/pool/clear", [])).status == 200
    assert await client.fleet_pool() is None
    assert site.audit[0].action == "clear fleet pool"


def _row(body: str, member: str) -> list[str]:
    start = body.index(f'data-member="{member}"')
    row = body[start : body.index("</tr>", start)]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells]


Members = dict[str, tuple[int, int]]
# (the total and rows typed into the form, what the message names, the same pool through
# the API when the API is the one refusing it)
BAD_POOLS: list[tuple[str, list[tuple[str, str, str]], str, tuple[int, Members] | None]] = [
    ("0", [("email", "0", "1")], "total", (0, {"email": (0, 1)})),
    ("", [("email", "0", "1")], "total", None),
    ("ten", [("email", "0", "1")], "total", None),
    ("4", [], "queues", (4, {})),
    ("4", [("email", "3", "1"), ("reports", "2", "1")], "min_workers",
     (4, {"email": (3, 1), "reports": (2, 1)})),
    ("4", [("email", "0", "0")], "queues['email'].weight", (4, {"email": (0, 0)})),
    ("4", [("email", "-1", "1")], "queues['email'].min_workers", (4, {"email": (-1, 1)})),
    ("4", [("email", "x", "1")], "queues['email'].min_workers", None),
    ("4", [("email", "0", "1"), ("email", "1", "1")], "named twice", None),
    ("4", [("", "2", "1")], "row 1 has no queue name", None),
    ("4", [("q" * 201, "0", "1")], "queues", (4, {"q" * 201: (0, 1)})),
]  # fmt: skip


@pytest.mark.parametrize(("total", "rows", "field", "api"), BAD_POOLS)
async def test_a_bad_pool_shows_the_api_message_and_writes_nothing(
    site: Site,
    client: awa.AsyncClient,
    database_url: str,
    total: str,
    rows: list[tuple[str, str, str]],
    field: str,
    api: tuple[int, Members] | None,
) -> None:
    await client.set_fleet_pool(6, {"reports": awa.PoolMember(1, 2)})
    before = fleet_rows(database_url)
    reply = await site.post("/actions/pool", _pool_form(total, *rows))
    assert reply.status == 400, reply.body
    assert 'id="flash-error"' in reply.body and field in reply.body
    if api is not None:
        members = {name: awa.PoolMember(*values) for name, values in api[1].items()}
        with pytest.raises(awa.AwaError) as caught:  # MinWorkersExceedGlobal is a BuildError
            await client.set_fleet_pool(api[0], members)
        assert str(caught.value) in reply.body
    assert fleet_rows(database_url) == before
    assert site.audit == []
