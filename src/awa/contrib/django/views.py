"""A read-only page of queue counts for staff, linking to ``awa serve`` when configured.

It reads through a small blocking :class:`awa.Client` of its own (made on first view)
and writes nothing: pausing, retrying and overrides stay in ``awa serve`` and the CLI.
"""

from __future__ import annotations

import threading

from django.contrib.auth.decorators import user_passes_test
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from awa.client.sync_client import Client
from awa.contrib.django import conf

_reader: Client | None = None
_reader_lock = threading.Lock()


def _client() -> Client:
    global _reader
    with _reader_lock:
        if _reader is None:
            settings = conf.current()
            url = settings.database_url or conf.database_url(settings.database)
            _reader = Client(url, max_connections=2)
        return _reader


def _is_staff(user: object) -> bool:
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))


@require_safe
@user_passes_test(_is_staff)
def queues(request: HttpRequest) -> HttpResponse:
    """Per-queue counts, lag and pause state (``awa queue stats``), for staff users."""
    context = {"stats": _client().queue_stats(), "dashboard_url": conf.current().dashboard_url}
    return render(request, "awa/queues.html", context)
