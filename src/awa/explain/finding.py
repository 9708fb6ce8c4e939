"""What a reason probe returns, and the shape every probe has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awa.explain.facts import Facts
from awa.types import Reason, ReasonCode


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason that applies, and the words it lends the summary when it comes first:
    ``clause`` completes ``"Job 42 (send_email) …"``."""

    reason: Reason
    clause: str


Probe = Callable[[Facts], Finding | None]
"""A pure function from the facts to a finding, or None when its reason does not apply."""


def finding(code: ReasonCode, message: str, clause: str, **details: Any) -> Finding:
    """A :class:`Finding` whose reason carries ``details`` (JSON-ready values)."""
    return Finding(Reason(code, message, details), clause)
