"""Logging set-up for applications that want awa's records as text or JSON lines.

awa logs through the standard :mod:`logging` module under one logger, ``awa``. Key
records carry structured fields in ``extra``: ``event`` (``job_started``,
``job_finished``, ``job_retried``, ``job_failed``, ``job_cancelled``, ``job_stopped``,
``job_snoozed``, ``job_handed_back``, ``job_waiting_external``, ``job_rescued``,
``outcome_stale``, ``override_ignored``, ``overrides_applied``, ``lease_lost``,
``listener_reconnecting``, ``listener_reconnected``,
``leader_elected``, ``leader_released``, ``worker_started``, ``worker_stopped``, …) and,
where they apply, ``queue``, ``kind``, ``job_id``, ``run_lease``, ``attempt``, ``state``,
``outcome``, ``reason``, ``instance_id``. Nothing here is required: without :func:`configure` the
records simply propagate to whatever the application set up.

::

    import awa.log
    awa.log.configure(json=True, level="INFO")
"""

from __future__ import annotations

import json as _json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

import psycopg

from awa.errors import DatabaseError, SchemaNotMigrated

LOGGER_NAME = "awa"

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


# What a worker's loops meet when the database or the network fails: expected, and retried.
_EXPECTED_FAULTS = (psycopg.Error, OSError, DatabaseError, SchemaNotMigrated)


def fault(exc: BaseException) -> str:
    """``exc`` as a log line names it: its type, then its message (some have none) on
    one line — libpq's messages hold newlines, and a log collector (journald,
    Kubernetes) stores each line of a text log as an event of its own."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def traceback_unless_expected(exc: BaseException) -> BaseException | None:
    """``exc_info`` for a failed step of a loop that retries: none when the database or
    the network failed (the line says enough), the traceback otherwise — a fault in the
    code itself would else repeat for ever as a line that cannot be traced."""
    return None if isinstance(exc, _EXPECTED_FAULTS) else exc


def structured_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of ``record`` (everything that is not a standard attribute)."""
    return {
        k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message``, the
    structured fields, and ``exc`` when an exception is attached."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in structured_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return _json.dumps(entry, default=str, ensure_ascii=False).translate(_JSON_BREAKS)


# Characters a reader may take for the end of a line. A record is one line: a handler's
# error text holding "\n2026-… INFO awa: job 424242 … cancelled" wrote a second, forged
# record into a text log (a review); they are written out instead (\n). JSON escapes
# the ASCII ones itself, not the three Unicode separators Python's splitlines() honours.
_TEXT_BREAKS = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)
}
_TEXT_BREAKS |= {0x0A: "\\n", 0x0D: "\\r"}
_JSON_BREAKS = {c: f"\\u{c:04x}" for c in (0x85, 0x2028, 0x2029)}


def one_line(text: str) -> str:
    """``text`` with whatever could break its line written out (``\\n``)."""
    return text.translate(_TEXT_BREAKS)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message`` followed by the structured fields as ``key=value``,
    on one line (a traceback, when there is one, follows on its own lines)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        flat = logging.makeLogRecord(record.__dict__)  # other handlers see the record as is
        flat.msg, flat.args = one_line(record.getMessage()), None
        head, sep, tail = super().format(flat).partition("\n")  # a traceback below
        if tail:
            # A record's line begins with its time, a digit; a traceback's own lines never
            # do, but an exception's message may hold "\n2026-… INFO awa: …" and forge a
            # record there (a hook's error quoting the handler's, a review): indented.
            tail = "\n".join(f"  {t}" if t[:1].isdigit() else t for t in tail.split("\n"))
        fields = structured_fields(record)
        if fields:
            extras = " ".join(f"{key}={one_line(str(value))}" for key, value in fields.items())
            head = f"{head} [{extras}]"
        return f"{head}{sep}{tail}"


def configure(
    *,
    json: bool = False,
    level: int | str = logging.INFO,
    stream: IO[str] | None = None,
    propagate: bool | None = None,
) -> logging.Handler:
    """Send the ``awa`` logger's records to ``stream`` (default stderr) as text or JSON.

    Calling it again replaces the handler it installed before. ``level`` sets the
    ``awa`` logger's level (``"DEBUG"`` shows every job start and finish). ``propagate``
    None leaves propagation as it is (on by default); pass False when the root logger
    also has handlers and each record should be written once. Returns the handler.
    """
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        if getattr(handler, "_awa_configured", False):
            logger.removeHandler(handler)
            handler.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    handler._awa_configured = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level.upper() if isinstance(level, str) else level)
    if propagate is not None:
        logger.propagate = propagate
    return handler


__all__ = ["JsonFormatter", "TextFormatter", "configure", "structured_fields"]
