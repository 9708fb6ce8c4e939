"""A FastAPI app that enqueues from its endpoints and runs the worker in the same process,
with the awa dashboard at /awa/.

Run it: ``pip install 'awa[fastapi]' uvicorn``, set ``DATABASE_URL``, ``awa migrate``,
then ``uvicorn --factory app:create_app``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException

import awa
from awa.contrib.starlette import client_of, lifespan, mount_dashboard

AwaClient = Annotated[awa.AsyncClient, Depends(client_of)]


@dataclass
class SendWelcome:
    email: str


def create_app(database_url: str | None = None) -> FastAPI:
    """The app; the database comes from ``database_url`` or ``DATABASE_URL``."""
    client = awa.AsyncClient(database_url)

    @client.task(SendWelcome, queue="email")
    async def send_welcome(job: awa.Job[SendWelcome]) -> None:
        # A real app would send the email here.
        job.update_metadata({"sent_to": job.args.email})  # written with the outcome

    # Opens the client at start-up and runs a worker for the "email" queue in-process.
    # To run workers elsewhere instead, drop worker=True and build the client (and its
    # tasks) at module level, where `awa worker app:client` can import it
    # (docs/integrations/fastapi.md shows that layout).
    app = FastAPI(lifespan=lifespan(client, worker=True, queues=[("email", 4)]))
    # The dashboard at /awa/: with AWA_DASHBOARD_TOKEN set, every request must carry it;
    # without, put it behind your app's own authentication before exposing it.
    token = os.environ.get("AWA_DASHBOARD_TOKEN")
    mount_dashboard(app, "/awa", token=token, database_url=client.database_url)

    @app.post("/signups", status_code=201)
    async def signup(email: str, awa_client: AwaClient) -> dict[str, int]:
        if "@" not in email:
            raise HTTPException(400, "email: must be an email address")
        job = await awa_client.insert(SendWelcome(email))
        return {"job": job.id}

    @app.get("/jobs/{job_id}")
    async def job_state(job_id: int, awa_client: AwaClient) -> dict[str, object]:
        try:
            job = await awa_client.get_job(job_id)
        except awa.JobNotFound:
            raise HTTPException(404, f"no job {job_id}") from None
        return {"job": job.id, "state": job.state.value, "metadata": job.metadata}

    return app
