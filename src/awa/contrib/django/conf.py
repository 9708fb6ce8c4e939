"""``settings.AWA``: read once, validated in one place, every error naming its key.

::

    AWA = {
        "DATABASE": "default",       # the Django database alias awa uses
        "DATABASE_URL": None,        # or an explicit URL (default: built from the alias)
        "LISTEN_URL": None,          # a direct URL for LISTEN and the leader (PgBouncer)
        "MAX_CONNECTIONS": 10,       # the worker's and the read-only view's pool size
        "QUEUES": {"email": 10},     # awa_worker's queues when no --queue is given
        "TASKS_MODULE": "tasks",     # imported from every installed app at start-up
        "DASHBOARD_URL": None,       # where `awa serve` runs; the queues view links to it
    }
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from awa import validate
from awa.errors import ValidationError

_KEYS = frozenset(
    {
        "DATABASE",
        "DATABASE_URL",
        "LISTEN_URL",
        "MAX_CONNECTIONS",
        "QUEUES",
        "TASKS_MODULE",
        "DASHBOARD_URL",
    }
)


@dataclass(frozen=True, slots=True)
class AwaSettings:
    """The validated ``settings.AWA``."""

    database: str = "default"
    database_url: str | None = None
    listen_url: str | None = None
    max_connections: int = 10
    queues: dict[str, int] = field(default_factory=dict)
    tasks_module: str = "tasks"
    dashboard_url: str | None = None


def _key(name: str) -> str:
    return f"AWA['{name}']"


def _optional_text(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    return None if value is None else validate.text(_key(name), value, max_length=2_000)


def _queues(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(
            _key("QUEUES"), f"must be a dict of queue name → max_workers, got {value!r}"
        )
    return {
        _queue_name(name): validate.integer(f"{_key('QUEUES')}[{name!r}]", n, low=1)
        for name, n in value.items()
    }


def _queue_name(value: Any) -> str:
    """A queue name ``manage.py awa_worker`` can pass on as ``--queue NAME=N``."""
    name = validate.name(_key("QUEUES"), value)
    if "=" in name or ":" in name or name.startswith("-"):
        raise ValidationError(
            _key("QUEUES"), f"a queue name with '=' or ':', or starting with '-', cannot be "
            f"given to awa_worker's --queue, got {name!r}"
        )  # fmt: skip
    return name


def parse(raw: Any) -> AwaSettings:
    """Validate a ``settings.AWA`` value (None means all defaults)."""
    if raw is None:
        return AwaSettings()
    if not isinstance(raw, Mapping):
        raise ValidationError("AWA", f"must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValidationError(
            _key(unknown[0]), f"unknown setting (known: {', '.join(sorted(_KEYS))})"
        )
    return AwaSettings(
        database=validate.text(_key("DATABASE"), raw.get("DATABASE", "default")),
        database_url=_optional_text(raw, "DATABASE_URL"),
        listen_url=_optional_text(raw, "LISTEN_URL"),
        max_connections=validate.integer(
            _key("MAX_CONNECTIONS"), raw.get("MAX_CONNECTIONS", 10), low=1
        ),
        queues=_queues(raw.get("QUEUES")),
        tasks_module=validate.text(_key("TASKS_MODULE"), raw.get("TASKS_MODULE", "tasks")),
        dashboard_url=_optional_text(raw, "DASHBOARD_URL"),
    )


def current() -> AwaSettings:
    """``settings.AWA`` of the running project, validated."""
    from django.conf import settings

    return parse(getattr(settings, "AWA", None))


def database_url(alias: str) -> str:
    """A libpq connection string for the Django database ``alias`` (same server, name,
    user and options as Django uses)."""
    from django.db import connections
    from psycopg.conninfo import make_conninfo

    params = connections[alias].get_connection_params()
    # Keep what libpq understands; Django adds Python objects (cursor factory, adapters).
    plain = {
        k: str(v) for k, v in params.items()
        if isinstance(v, str | int) and k not in {"prepare_threshold", "client_encoding"}
    }  # fmt: skip
    return make_conninfo(**plain)
