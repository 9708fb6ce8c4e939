"""Printing for the CLI: aligned tables for people, stable JSON for scripts."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, enums and datetimes as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(to_jsonable(value), indent=2, sort_keys=False) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> None:
    """An aligned table (numbers right-aligned)."""
    table = Table(title=title, show_edge=False, header_style="bold")
    materialised = [list(r) for r in rows]
    for i, column in enumerate(columns):
        numeric = bool(materialised) and all(
            isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in materialised
        )
        table.add_column(column, justify="right" if numeric else "left")
    for row in materialised:
        table.add_row(*(_cell(v) for v in row))
    console.print(table)


def fail(message: str, status: int = 2) -> int:
    """Print one line on stderr and return the exit status."""
    sys.stderr.write(f"awa: error: {message}\n")
    return status
