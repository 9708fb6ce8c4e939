"""The batch operations page: preview an operation over a filter, apply it, follow and
cancel it (ADR 0028).

``GET /batches?op=move_queue&to=slow&kind=...`` shows the preview (count and first jobs)
and, under it, the confirmed apply button; the list of operations below refreshes with
their progress. Applying submits the operation (the jobs are fixed then) and runs it in
this process in the background; if the dashboard goes away, a worker's maintenance
leader or ``awa batch resume`` carries it on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import awa
from awa import validate
from awa.dashboard.actions import _done, _field, _optional_name, guarded
from awa.dashboard.app import dashboard, mount_root, who

OPS = {"move_queue": "move to queue", "set_priority": "set priority"}
WAITING = ("available", "scheduled", "retryable")
FILTERS = ("kind", "queue", "state")


def _text(source: Mapping[str, Any], name: str) -> str | None:
    raw = source.get(name)
    return raw.strip() if isinstance(raw, str) and raw.strip() else None


def _ids(source: Mapping[str, Any]) -> list[int] | None:
    text = _text(source, "ids")
    if text is None:
        return None
    parts = [p for p in text.replace(",", " ").split() if p]
    if not all(_decimal(p) and int(p) <= BIGINT_MAX for p in parts):
        raise awa.ValidationError("ids", f"must be job ids separated by commas, got {text!r}")
    return [int(p) for p in parts]


BIGINT_MAX = validate.BIGINT_MAX  # job ids are PostgreSQL bigints


def _decimal(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts "²", which ``int`` refuses."""
    return text.isascii() and text.isdigit()


def parse(source: Mapping[str, Any]) -> tuple[awa.MoveQueue | awa.SetPriority, dict[str, Any]]:
    """The operation and the filter a form (or the page's query) describes."""
    op = _text(source, "op")
    if op == "move_queue":
        operation: awa.MoveQueue | awa.SetPriority = awa.MoveQueue(
            _optional_name(source, "to") or ""
        )
    elif op == "set_priority":
        priority = _text(source, "priority") or ""
        if not _decimal(priority):
            raise awa.ValidationError("priority", f"must be 1 to 4, got {priority!r}")
        operation = awa.SetPriority(int(priority))
    else:
        raise awa.ValidationError("op", f"must be one of {', '.join(OPS)}, got {op!r}")
    filters: dict[str, Any] = {name: _text(source, name) for name in FILTERS}
    filters["queue"], filters["kind"] = (
        _optional_name(source, "queue"),
        _optional_name(source, "kind"),
    )
    filters["ids"] = _ids(source)
    return operation, filters


def describe(operation: awa.MoveQueue | awa.SetPriority) -> str:
    """A few words for the confirmation and the audit log."""
    if isinstance(operation, awa.MoveQueue):
        return f"move to queue {operation.queue}"
    return f"set priority {operation.priority}"


async def page(request: Request) -> Response:
    """The form, the preview when one was asked for, and the operations with progress."""
    d = dashboard(request)
    params = request.query_params
    preview = operation = None
    error = None
    if params.get("op"):
        try:
            operation, filters = parse(params)
            preview = await d.client.preview_batch(operation, **filters, sample=10)
        except awa.ValidationError as exc:
            error = str(exc)
    context = {
        "active": "batches",
        "form": {k: params.get(k, "") for k in ("op", "to", "priority", *FILTERS, "ids")},
        "ops": OPS,
        "waiting": WAITING,
        "preview": preview,
        "description": describe(operation) if operation is not None else "",
        "error": error,
        "operations": await d.client.list_batches(limit=20),
    }
    return d.page(request, "batches.html", "_batches_live.html", context)


async def apply(request: Request, form: FormData) -> Response:
    """Submit the previewed operation and run it in the background."""
    d, by = dashboard(request), who(request)
    operation, filters = parse(form)
    chunk = _text(form, "chunk_size") or "1000"
    if not _decimal(chunk):
        raise awa.ValidationError("chunk_size", f"must be a positive integer, got {chunk!r}")
    submitted = await d.client.apply_batch(
        operation, **filters, chunk_size=int(chunk), submitted_by=by, wait=False,
        allow_all=form.get("allow_all") == "yes",
    )  # fmt: skip
    d.run_batch(submitted.id)
    detail = f"{describe(operation)}, {submitted.total} job(s)"
    d.audit.record(by, "apply batch", f"batch {submitted.id}", detail)
    return _done(request, mount_root(request) + "/batches")


async def cancel(request: Request, form: FormData) -> Response:
    """Stop an operation after its chunk in flight."""
    d, by = dashboard(request), who(request)
    text = _field(form, "operation_id").strip()
    if not _decimal(text):
        raise awa.ValidationError("operation_id", f"must be a positive integer, got {text!r}")
    stopped = await d.client.cancel_batch(int(text))
    d.audit.record(by, "cancel batch", f"batch {stopped.id}", f"now {stopped.state}")
    return _done(request, mount_root(request) + "/batches")


def routes() -> list[Route]:
    """The page (GET) and its two actions (POST)."""
    return [
        Route("/batches", page),
        Route("/actions/batch/apply", guarded(apply), methods=["POST"]),
        Route("/actions/batch/cancel", guarded(cancel), methods=["POST"]),
    ]
