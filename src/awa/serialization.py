"""Turning job args into JSON and back into the handler's type."""

from __future__ import annotations

import dataclasses
import json
import re
from json.encoder import encode_basestring_ascii
from typing import Any

from awa.errors import SerializationError, ValidationError

try:  # the C accelerator of the json module; absent on some interpreters
    from json.encoder import c_make_encoder  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    c_make_encoder = None


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
# The same encoder, made once: JSONEncoder.encode builds a new C encoder on every call
# (a quarter of the client CPU of encoding small args). Without circular-reference
# markers, a cycle ends in RecursionError, reported like any too-deep nesting.
_C_ENCODER = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _default, encode_basestring_ascii, None, ":", ",", False, False, False
    )
)


def _encode(value: Any) -> str:
    if _C_ENCODER is None or isinstance(value, str):
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


def encode_json(value: Any, *, what: str = "args") -> str:
    """Compact JSON text, or :class:`SerializationError` naming ``what``.

    JSON that PostgreSQL's ``jsonb`` refuses (a NUL character, an unpaired surrogate)
    raises :class:`ValidationError` naming ``what``: caught here, it cannot reach a
    statement and fail it (for a batch of outcomes, fail every other job's too).
    """
    try:
        text = _encode(value)
    except RecursionError as exc:
        raise SerializationError(f"{what} are nested too deeply to encode as JSON") from exc
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} are not JSON-serialisable: {exc}") from exc
    if "\\u0000" in text or "\\ud" in text:  # rare: only then look closer
        problem = unstorable(text)
        if problem:
            raise ValidationError(what, f"contains {problem}, which PostgreSQL cannot store")
    return text


# Metadata, progress and a callback's payload are stored on the job row and come back
# with every read of it (each claim, list_jobs, the dashboard): unlike args, nothing in
# them should be big. Encoded with ensure_ascii, so characters are bytes.
MAX_METADATA_BYTES = 64 * 1024


def encode_bounded(value: Any, *, what: str, limit: int = MAX_METADATA_BYTES) -> str:
    """:func:`encode_json`, and ValidationError naming ``what`` past ``limit`` bytes."""
    text = encode_json(value, what=what)
    if len(text) > limit:
        raise ValidationError(
            what,
            f"encoded as {len(text)} bytes of JSON, over the limit of {limit} "
            f"({limit // 1024} KiB): keep big values elsewhere and store a reference",
        )
    return text


# One escape of JSON text as json.dumps writes it (ensure_ascii): \uXXXX or \<char>.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)")


def unstorable(text: str) -> str | None:
    """What in this JSON text ``jsonb`` would refuse — a NUL (``\\u0000``) or an unpaired
    surrogate — or None. Escapes are read left to right, so ``\\\\u0000`` (an escaped
    backslash, then ``u0000``) is rightly not a NUL."""
    low_expected_at = -1  # a high surrogate was just seen: a low one must follow here
    for match in _ESCAPE.finditer(text):
        code = int(match.group(1), 16) if match.group(1) else None
        if low_expected_at >= 0:
            if match.start() != low_expected_at or code is None or not 0xDC00 <= code <= 0xDFFF:
                return "an unpaired surrogate"
            low_expected_at = -1
        elif code == 0:
            return "a NUL character (\\u0000)"
        elif code is not None and 0xD800 <= code <= 0xDBFF:
            low_expected_at = match.end()
        elif code is not None and 0xDC00 <= code <= 0xDFFF:
            return "an unpaired surrogate"
    return "an unpaired surrogate" if low_expected_at >= 0 else None


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text) - limit} more characters]"


def storable_text(text: str) -> str:
    """``text`` with what PostgreSQL cannot store in text or jsonb (NUL, unpaired
    surrogates) replaced, for messages awa writes on its own (error entries)."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


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
