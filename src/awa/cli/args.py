"""Argument parsing that fails in one line with status 2, and value types naming the flag."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

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


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


INT4_MAX = 2_147_483_647  # settings stored as PostgreSQL integers


def bounded_int(low: int, high: int = INT4_MAX) -> Callable[[str], int]:
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


def process_count(text: str) -> int:
    """``auto`` (one per core this process may use, within its cgroup's CPU quota) or an
    integer >= 1."""
    if text == "auto":
        return usable_cpus()
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be 'auto' or an integer >= 1, got {text!r}"
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


def queue_workers(text: str) -> tuple[str, int]:
    """``NAME=N`` for ``awa worker --queue``."""
    name, sep, count = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=N, got {text!r}")
    return name, positive_int(count)


def with_example(description: str, example: str) -> dict[str, object]:
    """Keyword arguments giving a subcommand a description and an example in --help."""
    return {
        "description": description,
        "epilog": f"example:\n  {example}",
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
