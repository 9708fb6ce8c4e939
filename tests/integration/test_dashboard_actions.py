"""Dashboard actions with the inputs an operator's browser may send (found in review):
the overrides form carries every setting, queue names keep their spaces, and numbers
that are not plain ASCII digits are refused (a 400, or the form's message), never a 500."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
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


def test_names_with_spaces_at_their_ends_are_kept_by_every_form(database_url: str) -> None:
    """A review found the pool, fleet-limits and batch forms trimming names the API keeps
    as given: saving an unchanged pool swapped member " padded " for a queue "padded",
    and a batch for kind " sp " changed the jobs of kind "sp"."""

    async def seed(client: awa.AsyncClient) -> None:
        await client.insert_many([{}] * 3, kind=" sp ", queue=" padded ")
        await client.insert({}, kind="sp", queue=" padded ")

    _run(database_url, seed)
    with _http(database_url) as http:
        token = _csrf(http, "/pool")
        pool = [("csrf_token", token), ("total", "4"), ("member_queue", " padded "),
                ("member_min", " 2 "), ("member_weight", "3")]  # fmt: skip
        form_type = {"content-type": "application/x-www-form-urlencoded"}
        saved = http.post(PREFIX + "/actions/pool", content=urlencode(pool), headers=form_type,
                          follow_redirects=False)  # fmt: skip
        assert saved.is_redirect
        limits = {"csrf_token": token, "queue": " padded ", "concurrency": "2",
                  "partition_by": " tenant "}  # fmt: skip
        saved = http.post(PREFIX + "/actions/queue/limits", data=limits, follow_redirects=False)
        assert saved.is_redirect
        preview = http.get(PREFIX + "/batches", params={"op": "set_priority", "priority": "1",
                                                         "kind": " sp "})  # fmt: skip
        assert preview.status_code == 200 and "3 job" in preview.text

    stored = _run(database_url, lambda c: c.fleet_pool())
    assert stored is not None and list(stored.queues) == [" padded "]
    assert stored.queues[" padded "] == awa.PoolMember(min_workers=2, weight=3)
    limits_stored = _run(database_url, lambda c: c.queue_limits(" padded "))
    assert limits_stored is not None and limits_stored.partition_by == " tenant "


def test_bidirectional_controls_are_shown_not_obeyed_and_forms_keep_them(
    database_url: str,
) -> None:
    """A queue named RLO + "liame" read "email" — a second row beside the real one, and in
    its pause confirmation; an error ending in an RLO reversed awa's sentence after it,
    job id included (a review)."""
    spoof = "\u202eliame"

    async def seed(client: awa.AsyncClient) -> int:
        await client.insert({}, kind="k", queue="email")
        job = await client.insert({}, kind="k", queue=spoof)
        return job.id

    job_id = _run(database_url, seed)
    with _http(database_url) as http:
        overview = http.get(PREFIX + "/").text
        shown = re.sub(r'value="[^"]*"', "", overview)  # what the page says, less form values
        assert "\u202e" not in shown  # no control reaches the page as text ...
        assert "\\u202eliame" in shown  # ... it is written out where the name shows
        assert f'name="queue" value="{spoof}"' in overview  # the form posts the name itself
        assert "Pause queue \\u202eliame?" in overview  # the confirmation shows it too
        job = http.get(f"{PREFIX}/jobs/{job_id}").text
        assert "\u202e" not in job and "\\u202eliame" in job
        # Every form of the queue's own page names the very queue (a review: five of its
        # six posted the written-out name, acting on no queue or on another one).
        page = http.get(f"{PREFIX}/queues/{quote(spoof, safe='')}").text
        assert page.count(f'name="queue" value="{spoof}"') == 6  # pause too
        assert 'value="\\u202e' not in page
        paused = http.post(PREFIX + "/actions/queue/pause",
                           data={"csrf_token": _csrf(http, "/"), "queue": spoof},
                           follow_redirects=False)  # fmt: skip
        assert paused.status_code == 303
    stats = {s.queue: s.paused for s in _run(database_url, lambda c: c.queue_stats())}
    assert stats == {"email": False, spoof: True}


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


def test_a_job_page_offers_only_the_actions_that_would_change_the_job(database_url: str) -> None:
    """A review: both buttons showed whatever the state — cancel on a finished job "did"
    nothing (and the audit log read like a real cancel), and a dead-lettered job's
    buttons answered 404 on the page showing it."""

    async def seed(client: awa.AsyncClient) -> list[int]:
        return [j.id for j in await client.insert_many([{}] * 4, kind="k", queue="q")]

    available, completed, running, dead = _run(database_url, seed)
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
                   (completed,))  # fmt: skip
        db.execute("UPDATE awa.jobs SET state = 'running', attempt = 1, attempted_at = now(),"
                   " heartbeat_at = now() WHERE id = %s", (running,))  # fmt: skip
        db.execute("UPDATE awa.jobs SET state = 'failed', finalized_at = now() WHERE id = %s",
                   (dead,))  # fmt: skip
    _run(database_url, lambda c: c.move_failed_to_dlq([dead]))
    with _http(database_url) as http:
        shown = {}
        for job_id in (available, completed, running, dead):
            page = http.get(f"{PREFIX}/jobs/{job_id}")
            assert page.status_code == 200
            shown[job_id] = (
                'id="retry-job"' in page.text,
                'id="cancel-job"' in page.text,
                f"awa dlq retry {job_id}" in page.text,
            )
    assert shown == {
        available: (False, True, False),
        completed: (True, False, False),
        running: (False, True, False),
        dead: (False, False, True),
    }
