"""The actions (POST only): pause/resume, set/clear overrides, set/clear fleet limits,
set/clear the fleet pool, retry failed, retry/cancel.

Each one checks the CSRF token (the middleware has already checked the access token and
refused everything in read-only mode), acts through the public API, and records who did
what in the audit log. The page asks for confirmation first (``hx-confirm``). Success
answers htmx with ``HX-Redirect`` (a plain form gets 303); a refused value answers 400
with the message, which htmx shows in the page's message area, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

import awa
from awa import validate
from awa.dashboard.app import dashboard, mount_root, path_segment, who
from awa.dashboard.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    OPERATOR_COOKIE,
    cookie_name,
    local_redirect,
)
from awa.dashboard.views import SETTINGS

Action = Callable[[Request, FormData], Awaitable[Response]]


def queue_url(queue: str) -> str:
    """The queue page's path."""
    return f"/queues/{path_segment(queue)}"


def _field(form: FormData, name: str) -> str:
    """A required field, as sent: a queue name may hold spaces at its ends (the API
    allows them), and trimming it would act on another queue."""
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        raise awa.ValidationError(name, "is required")
    return value


def _next(request: Request, form: FormData, default: str) -> str:
    """Where to go afterwards: a local path only (never another site). ``next`` is a
    page's full path; ``default`` is one of ours, under the mount point."""
    return local_redirect(form.get("next")) or mount_root(request) + default


def _done(request: Request, target: str) -> Response:
    if request.headers.get("hx-request"):
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


def _refused(request: Request, message: str, status_code: int = 400) -> Response:
    d = dashboard(request)
    if request.headers.get("hx-request"):
        headers = {"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"}
        response = d.render(request, "_flash.html", {"error": message}, status_code)
        response.headers.update(headers)
        return response
    return d.render(request, "error.html", {"message": message}, status_code)


def guarded(action: Action) -> Callable[[Request], Awaitable[Response]]:
    """Check the CSRF token, run ``action``, turn awa's refusals into a message."""

    async def endpoint(request: Request) -> Response:
        form = await request.form()
        # The page's header token is rendered once, a form's field with every live refresh:
        # after the cookie was renewed (another tab, a refresh in flight) only the field
        # may still match, so either one that matches will do.
        guard = dashboard(request).guard
        submitted = [request.headers.get(CSRF_HEADER), form.get(CSRF_FIELD)]
        if not any(isinstance(s, str) and guard.csrf_ok(request, s) for s in submitted):
            return PlainTextResponse(
                "missing or stale CSRF token: reload the page and try again", status_code=403
            )
        try:
            return await action(request, form)
        except awa.JobNotFound as exc:
            return _refused(request, str(exc), 404)
        except awa.AwaError as exc:
            return _refused(request, str(exc))

    endpoint.__name__ = action.__name__
    return endpoint


async def pause(request: Request, form: FormData) -> Response:
    """Pause a queue; ``paused_by`` records who."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    await d.client.pause_queue(queue, paused_by=by)
    d.audit.record(by, "pause", f"queue {queue}")
    return _done(request, _next(request, form, queue_url(queue)))


async def resume(request: Request, form: FormData) -> Response:
    """Resume a paused queue."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    await d.client.resume_queue(queue)
    d.audit.record(by, "resume", f"queue {queue}")
    return _done(request, _next(request, form, queue_url(queue)))


def _optional(form: FormData, name: str) -> str | None:
    raw = form.get(name)
    return raw.strip() if isinstance(raw, str) and raw.strip() else None


def _optional_name(form: Mapping[str, Any], name: str) -> str | None:
    """A name (a queue's, a kind's, an args key) as sent, or None when blank: the API
    keeps spaces at its ends as part of it, and trimming it would act on something
    else."""
    raw = form.get(name)
    return raw if isinstance(raw, str) and raw.strip() else None


def _optional_int(form: FormData, name: str) -> int | None:
    text = _optional(form, name)
    return None if text is None else _int_text(name, text)


def _int_text(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise awa.ValidationError(name, f"must be an integer, got {text!r}") from None
    if value > validate.INT32_MAX:  # the columns are PostgreSQL integers
        raise awa.ValidationError(name, f"must be <= {validate.INT32_MAX}, got {value}")
    return value


def _optional_float(form: FormData, name: str) -> float | None:
    text = _optional(form, name)
    try:
        return None if text is None else float(text)
    except ValueError:
        raise awa.ValidationError(name, f"must be a number, got {text!r}") from None


async def set_overrides(request: Request, form: FormData) -> Response:
    """Replace every override of a queue (an empty field reverts that setting): the form
    sends all of them, so each is read here (a whole-state write must not drop any)."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    values: dict[str, Any] = {
        key: _optional_float(form, key) if key == "rate_limit" else _optional_int(form, key)
        for key in SETTINGS
    }
    stored = await d.client.set_runtime_overrides(queue, **values)
    detail = ", ".join(f"{k}={'-' if getattr(stored, k) is None else getattr(stored, k)}"
                       for k in SETTINGS)  # fmt: skip
    d.audit.record(by, "set overrides", f"queue {queue}", detail)
    return _done(request, _next(request, form, queue_url(queue)))


async def clear_overrides(request: Request, form: FormData) -> Response:
    """Remove every override of a queue."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    await d.client.clear_runtime_overrides(queue)
    d.audit.record(by, "clear overrides", f"queue {queue}")
    return _done(request, _next(request, form, queue_url(queue)))


LIMIT_FIELDS = ("concurrency", "rate_limit", "burst", "partition_by")
POOL_TARGET = "fleet pool"


async def set_limits(request: Request, form: FormData) -> Response:
    """Replace a queue's fleet limits (an empty field removes that limit; all empty
    removes them all, as the API does)."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    stored = await d.client.set_queue_limits(
        queue,
        concurrency=_optional_int(form, "concurrency"),
        rate_limit=_optional_float(form, "rate_limit"),
        burst=_optional_int(form, "burst"),
        partition_by=_optional_name(form, "partition_by"),
    )
    detail = "none: cleared" if stored is None else ", ".join(
        f"{k}={'-' if getattr(stored, k) is None else getattr(stored, k)}" for k in LIMIT_FIELDS
    )  # fmt: skip
    d.audit.record(by, "set fleet limits", f"queue {queue}", detail)
    return _done(request, _next(request, form, queue_url(queue)))


async def clear_limits(request: Request, form: FormData) -> Response:
    """Remove a queue's fleet limits."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    await d.client.clear_queue_limits(queue)
    d.audit.record(by, "clear fleet limits", f"queue {queue}")
    return _done(request, _next(request, form, queue_url(queue)))


def _pool_members(form: FormData) -> dict[str, awa.PoolMember]:
    """The member rows of the pool form (queue, min, weight); blank rows are skipped, a
    blank minimum is 0 and a blank weight 1, as in the API."""
    names, mins, weights = (form.getlist(f"member_{k}") for k in ("queue", "min", "weight"))
    if not len(names) == len(mins) == len(weights):
        raise awa.ValidationError("queues", "every member row needs a queue, min and weight")
    members: dict[str, awa.PoolMember] = {}
    for row, (name, low, weight) in enumerate(zip(names, mins, weights, strict=True), 1):
        # the numbers are trimmed; the queue's name is kept as sent (spaces at its ends
        # are part of it: trimming it would swap the member for another queue)
        name, low, weight = str(name), str(low).strip(), str(weight).strip()
        if not name.strip():
            if low or weight:
                raise awa.ValidationError("queues", f"row {row} has no queue name")
            continue
        if name in members:
            raise awa.ValidationError("queues", f"{name!r} is named twice")
        members[name] = awa.PoolMember(
            min_workers=_int_text(f"queues[{name!r}].min_workers", low or "0"),
            weight=_int_text(f"queues[{name!r}].weight", weight or "1"),
        )
    return members


async def set_pool(request: Request, form: FormData) -> Response:
    """Replace the fleet pool: its total and every member."""
    d, by = dashboard(request), who(request)
    total = _int_text("total", _field(form, "total"))
    pool = await d.client.set_fleet_pool(total, _pool_members(form))
    members = ", ".join(
        f"{name} min {m.min_workers} weight {m.weight}" for name, m in pool.queues.items()
    )
    d.audit.record(by, "set fleet pool", POOL_TARGET, f"total {pool.total}: {members}")
    return _done(request, _next(request, form, "/pool"))


async def clear_pool(request: Request, form: FormData) -> Response:
    """Remove the fleet pool."""
    d, by = dashboard(request), who(request)
    existed = await d.client.clear_fleet_pool()
    d.audit.record(by, "clear fleet pool", POOL_TARGET, "" if existed else "there was none")
    return _done(request, _next(request, form, "/pool"))


async def retry_failed(request: Request, form: FormData) -> Response:
    """Make every failed job of a queue available again."""
    d, queue, by = dashboard(request), _field(form, "queue"), who(request)
    retried = await d.client._retry_failed_count(queue=queue)
    d.audit.record(by, "retry failed", f"queue {queue}", f"{retried} job(s)")
    return _done(request, _next(request, form, queue_url(queue)))


def _job_id(form: FormData) -> int:
    text = _field(form, "job_id").strip()
    if not (text.isascii() and text.isdigit()):  # "²" is a digit to str.isdigit
        raise awa.ValidationError("job_id", f"must be a positive integer, got {text!r}")
    return int(text)


async def retry_job(request: Request, form: FormData) -> Response:
    """Make one job available now."""
    d, job_id, by = dashboard(request), _job_id(form), who(request)
    job = await d.client.retry(job_id)
    d.audit.record(by, "retry", f"job {job_id}", f"now {job.state.value}")
    return _done(request, _next(request, form, f"/jobs/{job_id}"))


async def cancel_job(request: Request, form: FormData) -> Response:
    """Cancel one job that has not finished."""
    d, job_id, by = dashboard(request), _job_id(form), who(request)
    job = await d.client.cancel(job_id)
    d.audit.record(by, "cancel", f"job {job_id}", f"now {job.state.value}")
    return _done(request, _next(request, form, f"/jobs/{job_id}"))


async def set_operator(request: Request, form: FormData) -> Response:
    """Remember the name recorded with this browser's actions (a cookie, not a login)."""
    name = _field(form, "operator")
    if len(name) > 64 or not (name.isascii() and name.isprintable()):
        raise awa.ValidationError("operator", "must be at most 64 printable ASCII characters")
    response = _done(request, _next(request, form, "/"))
    response.set_cookie(
        cookie_name(request, OPERATOR_COOKIE), name, httponly=True, samesite="strict",
        secure=dashboard(request).guard.secure(request),
    )  # fmt: skip
    return response


def routes() -> list[Route]:
    """The action routes (POST only)."""
    table: dict[str, Action] = {
        "/actions/queue/pause": pause,
        "/actions/queue/resume": resume,
        "/actions/queue/overrides": set_overrides,
        "/actions/queue/overrides/clear": clear_overrides,
        "/actions/queue/limits": set_limits,
        "/actions/queue/limits/clear": clear_limits,
        "/actions/pool": set_pool,
        "/actions/pool/clear": clear_pool,
        "/actions/queue/retry-failed": retry_failed,
        "/actions/job/retry": retry_job,
        "/actions/job/cancel": cancel_job,
        "/actions/operator": set_operator,
    }
    return [Route(path, guarded(action), methods=["POST"]) for path, action in table.items()]
