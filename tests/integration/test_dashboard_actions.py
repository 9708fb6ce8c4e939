"""Dashboard actions with the inputs an operator's browser may send (found in review):
the overrides form carries every setting, queue names keep their spaces, and numbers
that are not plain ASCII digits are refused (a 400, or the form's message), never a 500."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI
from starlette.testclient import TestClient

import awa
from awa.contrib.starlette import mount_dashboard

PREFIX = "/awa"


def _run(database_url: str, work: Any) -> Any:
    async def go() -> Any:
        async with awa.AsyncClient(database_url, max_connections=1) as client:
            return await work(client)

    return asyncio.run(go())


def _http(database_url: str) -> TestClient:
    app = FastAPI()
    mount_dashboard(app, PREFIX, database_url=database_url, token=None)
    return TestClient(app)


def _csrf(http: TestClient, page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', http.get(PREFIX + page).text)
    assert found is not None
    return found.group(1)


def test_saving_the_overrides_form_keeps_every_setting(database_url: str) -> None:
    async def seed(client: awa.AsyncClient) -> None:
        await client.insert({}, kind="k", queue="alpha")
        await client.set_runtime_overrides("alpha", max_workers=2, poll_interval_ms=300)

    _run(database_url, seed)
    with _http(database_url) as http:
        form = {"csrf_token": _csrf(http, "/queues/alpha"), "queue": "alpha",
                "poll_interval_ms": "400", "max_workers": "2", "weight": "3"}  # fmt: skip
        saved = http.post(PREFIX + "/actions/queue/overrides", data=form, follow_redirects=False)
        assert saved.status_code == 303
        bad = http.post(
            PREFIX + "/actions/queue/overrides", data={**form, "max_workers": "abc"},
            follow_redirects=False,
        )  # fmt: skip
        assert bad.status_code == 400

    stored = _run(database_url, lambda c: c.queue_runtime_overrides("alpha"))
    assert (stored.poll_interval_ms, stored.max_workers, stored.weight) == (400, 2, 3)


def test_a_queue_name_with_spaces_at_its_ends_is_the_queue_acted_on(database_url: str) -> None:
    _run(database_url, lambda c: c.insert({}, kind="k", queue=" padded "))
    with _http(database_url) as http:
        token = _csrf(http, "/")
        paused = http.post(
            PREFIX + "/actions/queue/pause", data={"csrf_token": token, "queue": " padded "},
            follow_redirects=False,
        )  # fmt: skip
        assert paused.status_code == 303

    stats = {s.queue: s.paused for s in _run(database_url, lambda c: c.queue_stats())}
    assert stats == {" padded ": True}  # not a new queue "padded"


def test_numbers_that_are_not_ascii_digits_are_a_400(database_url: str) -> None:
    with _http(database_url) as http:
        token = _csrf(http, "/")
        retried = http.post(PREFIX + "/actions/job/retry", data={"csrf_token": token,
                                                                 "job_id": "\u00b2"})  # fmt: skip
        assert retried.status_code == 400
        for query in ("op=set_priority&priority=%C2%B2&queue=alpha",
                      "op=move_queue&to=beta&ids=99999999999999999999"):  # fmt: skip
            preview = http.get(f"{PREFIX}/batches?{query}")  # the form says what is wrong
            assert preview.status_code == 200 and "must be" in preview.text, query
