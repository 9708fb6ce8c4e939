"""The runtime overrides a queue can take (design record 038, CONTRACT §5 and §10): one
definition of their names and bounds, shared by the admin API, the worker's control state,
the CLI and the dashboard.

Tier 1 (the record): ``poll_interval_ms``, ``claim_batch_size``, ``rate_limit``,
``deadline_ms``. Tier 2 (CONTRACT §10): ``max_workers``, ``min_workers``, ``weight`` —
per-process permits, changed live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from awa import validate
from awa.errors import ValidationError


def _integer(low: int) -> Callable[[str, Any], int]:
    # The override columns are PostgreSQL integers.
    return lambda field, value: validate.integer(field, value, low=low, high=validate.INT32_MAX)


VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "poll_interval_ms": _integer(1),
    "claim_batch_size": _integer(1),
    "rate_limit": validate.rate,
    "deadline_ms": _integer(0),
    "max_workers": _integer(1),
    "min_workers": _integer(0),
    "weight": _integer(1),
}
KEYS: tuple[str, ...] = tuple(VALIDATORS)
"""Every override, in the order reports list them."""


def validated(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (None = not overridden) checked against each override's bounds; a
    ValidationError names the first bad one."""
    unknown = set(values) - set(KEYS)
    if unknown:
        raise ValidationError("overrides", f"unknown: {', '.join(sorted(unknown))}")
    return {
        key: None if values.get(key) is None else VALIDATORS[key](key, values[key]) for key in KEYS
    }
