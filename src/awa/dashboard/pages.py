"""The pages (GET only): overview, queue detail, jobs, job detail, runtime, fleet pool,
audit.

Each page has a live part that htmx polls with ``?fragment=live`` every refresh interval.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import awa
from awa.dashboard.app import dashboard
from awa.dashboard.charts import line_chart
from awa.dashboard.views import (
    SETTINGS,
    capacity_text,
    fleet_brief,
    fleet_seen_text,
    instance_age_s,
    instance_health,
    limits_text,
    pool_view,
    queue_views,
)
from awa.types import CANCEL_APPLIES_TO, RETRY_APPLIES_TO

JOB_LIMITS = (20, 50, 100, 500)


async def overview(request: Request) -> Response:
    """Every queue: counts, throughput, lag, pause, mode and capacity, badges for a stored
    override, fleet limits and fleet-pool membership; the fleet pool's use."""
    d = dashboard(request)
    queues, instances, pool = await queue_views(d.client)
    context = {
        "active": "overview",
        "queues": queues,
        "instances": instances,
        "pool": pool,
        "limits_text": limits_text,
        "audit": d.audit.recent(8),
    }
    return d.page(request, "overview.html", "_overview_live.html", context)


async def queue_detail(request: Request) -> Response:
    """One queue: counts, charts, fleet limits, configured vs override vs effective per live
    worker."""
    d = dashboard(request)
    name = request.path_params["name"]
    try:
        queues, _, pool = await queue_views(d.client, only=name)
        waiting = await d.client.explain_queue(name)  # why its oldest available job waits
    except awa.ValidationError as exc:  # not a name a queue can have: it cannot exist
        return d.render(request, "error.html", {"message": f"no such queue ({exc})"}, 404)
    ago, rate, running = d.sampler.series(name)
    context = {
        "active": "overview",
        "q": queues[0],
        "settings": SETTINGS,
        "charts": [
            line_chart("completed per minute", ago, rate, "line-rate"),
            line_chart("running jobs", ago, running, "line-running"),
        ],
        "capacity_text": capacity_text,
        "fleet_seen_text": fleet_seen_text,
        "pool": pool,
        "waiting": waiting,
        "audit": [e for e in d.audit.recent() if e.target == f"queue {name}"][:10],
    }
    return d.page(request, "queue.html", "_queue_live.html", context)


def _limit(text: str | None) -> int:
    try:
        value = int(text or 50)
    except ValueError:
        return 50
    return min(max(value, 1), max(JOB_LIMITS))


async def jobs(request: Request) -> Response:
    """Jobs newest first, filtered by state, kind and queue."""
    d = dashboard(request)
    params = request.query_params
    filters = {
        "state": params.get("state") or None,
        "kind": params.get("kind") or None,
        "queue": params.get("queue") or None,
    }
    limit = _limit(params.get("limit"))
    error = None
    found: list[awa.JobSummary] = []
    try:
        found = await d.client.list_job_summaries(**filters, limit=limit)
    except awa.ValidationError as exc:
        error = str(exc)
    context = {
        "active": "jobs",
        "jobs": found,
        "filters": filters,
        "limit": limit,
        "limits": JOB_LIMITS,
        "states": [s.value for s in awa.JobState],
        "error": error,
    }
    return d.page(request, "jobs.html", "_jobs_live.html", context)


async def job_detail(request: Request) -> Response:
    """One job: why it is where it is, args, errors, progress, attempts and timestamps."""
    d = dashboard(request)
    job_id = request.path_params["job_id"]
    try:
        explanation = await d.client.explain(job_id)
    except (awa.JobNotFound, awa.ValidationError):  # none, or none can have that id (0)
        return d.render(request, "error.html", {"message": f"job {job_id} not found"}, 404)
    state = explanation.job.state
    context = {
        "active": "jobs",
        "job": explanation.job,
        "explanation": explanation,
        # only the actions that would change the job (the API returns it unchanged
        # otherwise); a dead-lettered job is retried from the dead letter queue
        "dead_lettered": any(r.details.get("dead_letter") for r in explanation.reasons),
        "can_retry": state in RETRY_APPLIES_TO,
        "can_cancel": state in CANCEL_APPLIES_TO,
        "audit": [e for e in d.audit.recent() if e.target == f"job {job_id}"][:10],
    }
    return d.page(request, "job.html", "_job_live.html", context)


async def runtime(request: Request) -> Response:
    """Live workers: host, pid, leader, health and per-queue permits."""
    d = dashboard(request)
    instances = await d.client.list_runtime_instances()
    context = {
        "active": "runtime",
        "instances": instances,
        "health": instance_health,
        "age": instance_age_s,
        "capacity_text": capacity_text,
        "fleet_brief": fleet_brief,
    }
    return d.page(request, "runtime.html", "_runtime_live.html", context)


async def pool(request: Request) -> Response:
    """The fleet pool: total, each member's minimum, weight, running jobs and share."""
    d = dashboard(request)
    stored, stats = await asyncio.gather(d.client.fleet_pool(), d.client.queue_stats())
    context = {
        "active": "pool",
        "pool": None if stored is None else pool_view(stored, stats),
        "audit": [e for e in d.audit.recent() if e.target == "fleet pool"][:10],
        "blank_rows": range(3),
    }
    return d.page(request, "pool.html", "_pool_live.html", context)


async def audit(request: Request) -> Response:
    """Every action taken through this dashboard process, newest first."""
    d = dashboard(request)
    return d.render(request, "audit.html", {"active": "audit", "audit": d.audit.recent()})


def routes() -> list[Route]:
    """The page routes."""
    return [
        Route("/", overview),
        Route("/queues/{name:path}", queue_detail),
        Route("/jobs", jobs),
        Route("/jobs/{job_id:int}", job_detail),
        Route("/runtime", runtime),
        Route("/pool", pool),
        Route("/audit", audit),
    ]
