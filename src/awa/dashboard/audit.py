"""Who did what from the dashboard, and when: kept in memory and logged to ``awa.dashboard``."""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

logger = logging.getLogger("awa.dashboard")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action taken through the dashboard."""

    at: datetime
    who: str
    action: str
    target: str
    detail: str = ""


class AuditLog:
    """The last ``maxlen`` actions of this dashboard process, newest first on read.

    Every entry is also logged at INFO to the ``awa.dashboard`` logger (which propagates
    to ``awa``), so a process-wide log keeps them past a restart.
    """

    def __init__(self, maxlen: int = 500) -> None:
        self._entries: collections.deque[AuditEntry] = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def record(self, who: str, action: str, target: str, detail: str = "") -> AuditEntry:
        """Remember an action and log it."""
        entry = AuditEntry(datetime.now(UTC), who, action, target, detail)
        with self._lock:
            self._entries.append(entry)
        target, who, detail = _one_line(target), _one_line(who), _one_line(detail)
        logger.info(
            "dashboard action: %s %s by %s%s", action, target, who, f" ({detail})" if detail else ""
        )
        return entry

    def recent(self, limit: int | None = None) -> list[AuditEntry]:
        """The newest ``limit`` entries (all when None), newest first."""
        with self._lock:
            entries = list(reversed(self._entries))
        return entries if limit is None else entries[:limit]


def _one_line(text: str) -> str:
    """``text`` with its control characters escaped: a queue name holding a newline and a
    made-up log line printed a second, forged "dashboard action" line (a review)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
