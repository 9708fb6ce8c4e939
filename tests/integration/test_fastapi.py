"""awa.contrib.starlette with the example FastAPI app (examples/fastapi) on the test
PostgreSQL: the lifespan opens the client and runs a worker in the web process, and
endpoints enqueue through the client it opened."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("fastapi")

from starlette.testclient import TestClient

import awa
from awa.contrib.starlette import lifespan, running
from tests.helpers import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi" / "app.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_example_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def _instances(database_url: str) -> int:
    async def count() -> int:
        async with awa.AsyncClient(database_url, max_connections=1) as client:
            return len(await client.list_runtime_instances())

    return asyncio.run(count())


def test_the_example_enqueues_and_runs_jobs_in_process(database_url: str) -> None:
    app = _example().create_app(database_url)
    with TestClient(app) as http:
        # The lifespan started a worker: it registers itself on its first publish.
        wait_until(lambda: _instances(database_url) == 1)
        created = http.post("/signups", params={"email": "ada@example.com"})
        assert created.status_code == 201
        job_id = created.json()["job"]

        def done() -> dict[str, object] | None:
            body = http.get(f"/jobs/{job_id}").json()
            return body if body["state"] == "completed" else None

        body = wait_until(done, timeout=30)
        assert body["metadata"] == {"sent_to": "ada@example.com"}
        assert http.post("/signups", params={"email": "nope"}).status_code == 400
        assert http.get("/jobs/999999").status_code == 404
        dashboard = http.get("/awa/jobs?queue=email")
        assert dashboard.status_code == 200 and f'href="/awa/jobs/{job_id}"' in dashboard.text
    assert _instances(database_url) == 0  # shut down with the app


async def test_running_without_a_worker_only_opens_the_client(database_url: str) -> None:
    client = awa.AsyncClient(database_url)
    async with running(client) as opened:
        job = await opened.insert({}, kind="k")
        assert (await opened.get_job(job.id)).state == awa.JobState.AVAILABLE
        assert await opened.list_runtime_instances() == []
    with pytest.raises(awa.ValidationError, match="worker: queues and worker settings"):
        async with running(client, queues=[("q", 1)]):
            pass


def test_a_blocking_client_is_refused_naming_the_field(sync_client: awa.Client) -> None:
    with pytest.raises(awa.ValidationError, match=r"client: expected an awa\.AsyncClient"):
        lifespan(sync_client)  # type: ignore[arg-type]
