"""Job kind names derived from args types."""

from __future__ import annotations

import re

from awa.errors import ValidationError

_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """``SendEmail`` → ``send_email``; acronyms stay whole (``SMTPEmail`` → ``smtp_email``)."""
    name = _ACRONYM_BOUNDARY.sub(r"\1_\2", name)
    name = _WORD_BOUNDARY.sub(r"\1_\2", name)
    return name.replace("-", "_").lower()


def derive_kind(cls: type | str) -> str:
    """The default job kind of an args class (or class name): its snake_case."""
    if not isinstance(cls, str | type):
        raise ValidationError("args_type", f"must be a class or a class name, got {cls!r}")
    return snake_case(cls if isinstance(cls, str) else cls.__name__)
