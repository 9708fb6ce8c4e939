"""Turning job args into JSON and back into the handler's type."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from awa.errors import SerializationError


def _default(value: Any) -> Any:
    # Nested dataclasses and pydantic models inside dict args are encoded the same way.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"object of type {type(value).__name__} is not JSON serialisable")


def args_to_dict(args: Any) -> dict[str, Any]:
    """A dataclass instance, pydantic model or dict as a plain dict."""
    if isinstance(args, dict):
        return args
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
    dump = getattr(args, "model_dump", None)
    if callable(dump):
        result = dump(mode="json")
        if isinstance(result, dict):
            return result
    raise SerializationError(
        f"args must be a dataclass instance, a pydantic model or a dict, got {type(args).__name__}"
    )


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_default, allow_nan=False)


def encode_json(value: Any, *, what: str = "args") -> str:
    """Compact JSON text, or :class:`SerializationError` naming ``what``."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} are not JSON-serialisable: {exc}") from exc


def decode_args(args_type: type[Any] | None, data: Any) -> Any:
    """Build the registered args type from stored JSON; dicts pass through."""
    if args_type is None or args_type is dict or not isinstance(data, dict):
        return data
    validate = getattr(args_type, "model_validate", None)
    try:
        if callable(validate):
            return validate(data)
        if dataclasses.is_dataclass(args_type):
            names = {f.name for f in dataclasses.fields(args_type) if f.init}
            return args_type(**{k: v for k, v in data.items() if k in names})
        return args_type(**data)
    except Exception as exc:
        raise SerializationError(f"cannot decode args into {args_type.__name__}: {exc}") from exc
