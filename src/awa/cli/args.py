"""Argument parsing that fails in one line with status 2, and value types naming the flag."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import psycopg
from psycopg import conninfo

from awa import validate
from awa.errors import ValidationError
from awa.supervisor.cpus import usable_cpus


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"awa: error: {message}\n")
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def bounded_int(low: int, high: int = validate.INT32_MAX) -> Callable[[str], int]:
    """A parser of integers within [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


row_id = bounded_int(1, validate.BIGINT_MAX)
"""A job's or an operation's id (a PostgreSQL bigint)."""


def rate(text: str) -> float:
    """A rate limit in jobs per second, within the bounds the API accepts."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    try:
        return validate.rate("rate", value)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


MAX_PROCESSES = 1024
"""The most worker processes one supervisor starts (each is an interpreter with its own
connections: more belongs on more hosts, docs/scaling.md)."""


def process_count(text: str) -> int:
    """``auto`` (one per core this process may use, within its cgroup's CPU quota) or an
    integer from 1 to MAX_PROCESSES."""
    if text == "auto":
        return min(usable_cpus(), MAX_PROCESSES)
    try:
        return bounded_int(1, MAX_PROCESSES)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be 'auto' or an integer from 1 to {MAX_PROCESSES}, got {text!r}"
        ) from None


def postgres_url(text: str) -> str:
    """A libpq connection string (``postgresql://…`` or ``key=value …``), never echoed:
    it may hold a password."""
    try:
        conninfo.conninfo_to_dict(text)
    except psycopg.ProgrammingError:
        raise argparse.ArgumentTypeError("not a PostgreSQL URL or key=value string") from None
    if not text.strip():
        raise argparse.ArgumentTypeError("is blank")
    return text


WEIGHTED_FORM = "NAME[:min=N][,weight=N]"


def weighted_options(text: str) -> tuple[str, dict[str, int]]:
    """``NAME[:min=N][,weight=N]``: the name and the options given (``min``, ``weight``)."""
    name, _, options = text.partition(":")
    if not name or "=" in name:  # "a,weight=2": a mistyped ':' is not a queue's name
        raise argparse.ArgumentTypeError(f"expected {WEIGHTED_FORM}, got {text!r}")
    values: dict[str, int] = {}
    for option in filter(None, options.split(",")):
        key, sep, raw = option.partition("=")
        if not sep or key not in ("min", "weight"):
            raise argparse.ArgumentTypeError(
                f"expected {WEIGHTED_FORM}, got {text!r} (unknown {option!r})"
            )
        if key in values:
            raise argparse.ArgumentTypeError(f"{key}= given twice in {text!r}")
        values[key] = bounded_int(0 if key == "min" else 1)(raw)
    return name, values


@dataclass(frozen=True, slots=True)
class QueueFlag:
    """One ``awa worker --queue``: ``NAME=N`` (its ``max_workers``, hard-reserved mode) or
    ``NAME[:min=N][,weight=N]`` (its share of ``--global-max-workers``, weighted mode)."""

    text: str  # as given, for the supervisor's children
    name: str
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int | None = None

    def config(self) -> dict[str, Any]:
        """The queue's entry for ``start()``: only the settings the flag gave."""
        given = {"max_workers": self.max_workers, "min_workers": self.min_workers,
                 "weight": self.weight}  # fmt: skip
        return {"name": self.name, **{k: v for k, v in given.items() if v is not None}}


def queue_flag(text: str) -> QueueFlag:
    """``NAME=N`` or ``NAME[:min=N][,weight=N]`` for ``awa worker --queue``."""
    name, sep, count = text.partition("=")
    if sep and ":" not in name:
        if not name:
            raise argparse.ArgumentTypeError(f"expected NAME=N or {WEIGHTED_FORM}, got {text!r}")
        return QueueFlag(text, name, max_workers=positive_int(count))
    name, values = weighted_options(text)
    return QueueFlag(text, name, min_workers=values.get("min"), weight=values.get("weight"))


@dataclass(frozen=True, slots=True)
class SettingFlag:
    """One ``awa worker --set NAME=VALUE``: a keyword setting of ``start()``."""

    text: str  # as given, for the supervisor's children
    name: str
    value: int | bool


_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


def setting_flag(text: str) -> SettingFlag:
    """``NAME=VALUE`` naming a ``start()`` setting; the range is checked with the rest of
    the configuration (``build_worker_config``), so the reason reads as ``start()``'s."""
    from awa.config import START_SETTINGS, is_boolean_setting

    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    if name not in START_SETTINGS:
        known = ", ".join(sorted(START_SETTINGS))
        raise argparse.ArgumentTypeError(f"unknown setting {name!r} (one of: {known})")
    if is_boolean_setting(name):
        if raw.lower() not in _TRUE + _FALSE:
            raise argparse.ArgumentTypeError(f"{name} must be true or false, got {raw!r}")
        return SettingFlag(text, name, raw.lower() in _TRUE)
    try:
        return SettingFlag(text, name, int(raw))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be an integer, got {raw!r}") from None


def with_example(description: str, example: str) -> dict[str, object]:
    """Keyword arguments giving a subcommand a description and an example in --help."""
    return {
        "description": description,
        "epilog": f"example:\n  {example}",
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
