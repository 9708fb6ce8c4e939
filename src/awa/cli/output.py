"""Printing for the CLI: aligned tables for people, stable JSON for scripts."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO


def plain(value: Any) -> Any:
    """A dataclass (its public fields), an enum or a datetime as a JSON value: the
    ``default`` of every ``json.dumps`` here. The encoder walks the nesting itself, so
    a job's args print however deep the database stored them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: getattr(value, f.name)
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=plain) + "\n")


def report(as_json: bool, value: Any, text: str) -> None:
    """What a command did: ``value`` as one JSON document with ``--json``, else ``text``."""
    if as_json:
        print_json(value)
    else:
        print(text)


# What a terminal acts on or reorders instead of showing: C0 and C1 controls (ESC starts
# the sequences that recolour, retitle or rewrite a terminal; 0x9b is a one-byte CSI),
# DEL, and the bidirectional controls that display text in another order than it is
# stored. A job's error message, args or tags are anyone's text: shown in a table, they
# could repaint an operator's terminal or hide what they say (a review of the dashboard
# found the bidi case there). Shown escaped instead, as Python writes them.
_UNSHOWABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f"  # C0, DEL, C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional controls
    "\u2028\u2029]"  # line and paragraph separators
)


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on instead of show escaped
    (``\\x1b``, ``\\u202e``); a newline too, which would break a table's row."""
    return _UNSHOWABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def print_lines(text: str) -> None:
    """``text`` on stdout, each of its lines :func:`visible`."""
    print("\n".join(visible(line) for line in text.split("\n")))


def _cell(value: Any) -> str:
    return visible(_text(value))


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, datetime):  # in UTC: one table's times compare at a glance
        shown = value if value.tzinfo is None else value.astimezone(UTC)
        return shown.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):  # job args and the like: JSON, as --json prints them
        return json.dumps(value, ensure_ascii=False, default=plain)
    return str(value)


def format_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> str:
    """An aligned plain-text table (numbers right-aligned), ending in a newline."""
    materialised = [list(r) for r in rows]
    cells = [[_cell(v) for v in row] for row in materialised]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    numeric = [
        bool(materialised)
        and all(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in materialised)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if right else v.ljust(w)
            for v, w, right in zip(values, widths, numeric, strict=True)
        )
        return "  ".join(padded).rstrip()

    out = [title] if title else []
    out += [line(columns), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return "\n".join(out) + "\n"


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> None:
    """An aligned table on stdout (numbers right-aligned)."""
    sys.stdout.write(format_table(columns, rows, title))


class Redraw:
    """Redraws a block of text in place on a terminal (a live table); elsewhere only the
    last block is written, by :meth:`close`."""

    def __init__(self, stream: TextIO = sys.stdout) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._lines = 0
        self._last = ""

    def update(self, text: str) -> None:
        """Replace the block last drawn with ``text``."""
        self._last = text
        if not self._tty:
            return
        # Up to the block's first line, clear to the end of the screen, draw.
        up = f"\x1b[{self._lines}F" if self._lines else ""
        self._stream.write(f"{up}\x1b[J{text}")
        self._stream.flush()
        self._lines = text.count("\n")

    def close(self) -> None:
        """Leave the last block on screen (write it once when not on a terminal)."""
        if not self._tty and self._last:
            self._stream.write(self._last)
        self._stream.flush()


class ProgressLine:
    """``label  done/total`` rewritten in place on a terminal's stderr; silent elsewhere."""

    def __init__(self, label: str, total: int, *, enabled: bool = True) -> None:
        self._label = label
        self._total = total
        self._done = 0
        self._on = enabled and total > 0 and sys.stderr.isatty()

    def advance(self, count: int) -> None:
        """Count ``count`` more done and redraw."""
        self._done += count
        if self._on:
            width = 30
            filled = width * self._done // self._total
            bar = "#" * filled + "." * (width - filled)
            sys.stderr.write(f"\r{self._label} [{bar}] {self._done}/{self._total}")
            sys.stderr.flush()

    def close(self) -> None:
        """End the line."""
        if self._on:
            sys.stderr.write("\n")
            sys.stderr.flush()


def fail(message: str, status: int = 2) -> int:
    """Print one line on stderr and return the exit status."""
    sys.stderr.write(f"awa: error: {message}\n")
    return status
