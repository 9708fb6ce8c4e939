"""Turning job args into JSON and back into the handler's type."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import re
import sys
import threading
import types
import typing
from collections.abc import Callable, Mapping, MutableSequence, Sequence
from itertools import accumulate
from json.encoder import encode_basestring_ascii
from typing import Any

from awa.errors import SerializationError, ValidationError

_log = logging.getLogger("awa")

try:  # the C accelerator of the json module; absent on some interpreters
    from json.encoder import c_make_encoder  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    c_make_encoder = None


def _is_pydantic(value: Any) -> bool:
    kind = type(value)
    return hasattr(kind, "model_validate") and hasattr(kind, "model_fields")


def _dump_model(model: Any, *, by_alias: bool = False) -> Any:
    if not _is_pydantic(model):  # duck-typed: model_dump(mode=...) is all it promises
        return model.model_dump(mode="json")
    # round_trip: what model_validate takes back (computed fields left out).
    return model.model_dump(mode="json", round_trip=True, by_alias=by_alias)


# Enum values JSON holds as themselves (a tuple-valued enum would come back a list, which
# the enum does not take: refused at insert, not failed in the worker).
_SCALARS = (str, int, float, bool, type(None))


def _default(value: Any) -> Any:
    # Nested dataclasses and pydantic models inside dict args are encoded the same way.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if callable(getattr(value, "model_dump", None)):
        return _dump_model(value)
    if isinstance(value, enum.Enum) and isinstance(value.value, _SCALARS):
        return value.value  # (str and int enums never get here: JSON has them)
    raise TypeError(f"object of type {type(value).__name__} is not JSON serialisable")


def args_to_dict(args: Any) -> dict[str, Any]:
    """A dataclass instance, pydantic model or dict as a plain dict.

    A pydantic model is stored as it comes back equal from, the way the worker decodes
    it (``model_validate``): by field name, else by alias. One that comes back from
    neither (a ``SecretStr`` is dumped masked, an ``exclude=True`` field not at all) is
    refused: it would reach the handler changed, silently."""
    if isinstance(args, dict):
        return args
    try:
        if dataclasses.is_dataclass(args) and not isinstance(args, type):
            return dataclasses.asdict(args)
        if callable(getattr(args, "model_dump", None)):
            result = _model_as_stored(args) if _is_pydantic(args) else _dump_model(args)
            if isinstance(result, dict):
                return result
    except SerializationError:
        raise
    except Exception as exc:  # asdict deep-copies; pydantic raises its own errors
        raise SerializationError(f"args are not JSON-serialisable: {exc}") from exc
    raise SerializationError(
        f"args must be a dataclass instance, a pydantic model or a dict, got {type(args).__name__}"
    )


def _model_as_stored(model: Any) -> Any:
    """The dump of ``model`` that decodes back to it: by name, else by alias."""
    by_name = _dump_model(model)
    problem = _round_trip_problem(model, by_name)
    if problem is None:
        return by_name
    by_alias = _dump_model(model, by_alias=True)
    if by_alias != by_name and _round_trip_problem(model, by_alias) is None:
        return by_alias
    raise SerializationError(f"args of {type(model).__name__} {problem}")


def _round_trip_problem(model: Any, dumped: Any) -> str | None:
    try:
        again = type(model).model_validate(dumped)
    except Exception as exc:
        return f"would not decode from their own JSON, as the worker decodes them: {exc}"
    # Field by field (and extras): a private attribute is never stored, so it is not
    # compared, as pydantic's own __eq__ would.
    changed = [
        name
        for name in type(model).model_fields
        if getattr(again, name, None) != getattr(model, name, None)
    ]
    if getattr(again, "model_extra", None) != getattr(model, "model_extra", None):
        changed.append("(extra fields)")
    if not changed:
        return None
    return (
        f"would reach the handler changed (fields {', '.join(changed)}): a SecretStr is "
        "stored masked, a field with exclude=True not at all; give such a field a "
        "serializer that keeps its value"
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
    statement and fail it (for a batch of outcomes, fail every other job's too). So does
    JSON nested deeper than :data:`MAX_JSON_DEPTH`.
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
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and nested_too_deep(text):
        raise ValidationError(
            what,
            f"nests arrays and objects more than {MAX_JSON_DEPTH} levels deep, which awa "
            "cannot read back reliably: flatten it",
        )
    return text


# How deep stored JSON may nest. Python's decoder recurses once per level and shares
# the interpreter's recursion limit (1 000) with the frames of whoever reads the row:
# args 960 levels deep were stored, ran, and then failed every list_jobs of their queue
# and the dashboard's (a review). A level costs a count only past this many brackets.
MAX_JSON_DEPTH = 256
# Every character but quotes and brackets deleted, and objects' braces made brackets:
# what nests is all that is left.
_NESTING_ONLY = str.maketrans(
    {**{chr(c): None for c in range(128) if chr(c) not in '[]{}"'}, "{": "[", "}": "]"}
)
_STRING = re.compile('"[^"]*"')
_ROUNDS = 8  # innermost pairs taken away this many times before counting instead
_LEVEL = {"[": 1, "]": -1}


def nested_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` levels deep;
    brackets inside strings do not count.

    All in C-speed string operations, since ordinary args with a few hundred containers
    come here (a regex and a loop per bracket made their encoding 4–7 times slower): the
    escapes that could hide a quote go, then everything but quotes and brackets, then
    the strings (which hold only their brackets by then); a few rounds take away the
    innermost pairs, and what is still nested after them is counted in one pass."""
    if "\\" in text:  # \\ first: in \\" the quote ends the string
        text = text.replace("\\\\", "").replace('\\"', "")
    # Two quotes side by side are an empty string (one whose brackets were none), or the
    # end of one string and the start of the next: either way no bracket changes sides.
    nesting = text.translate(_NESTING_ONLY).replace('""', "")
    if '"' in nesting:  # the strings that hold brackets
        nesting = _STRING.sub("", nesting)
    rounds = min(limit, _ROUNDS)
    for _ in range(rounds):
        if not nesting:
            return False
        nesting = nesting.replace("[]", "")
    if not nesting:
        return False
    # Still nested past a few rounds (rare): one pass more, counting. Round after round
    # over args of many 255-deep nests took 0.9 s for 2 MB (a review).
    return max(accumulate(map(_LEVEL.__getitem__, nesting))) > limit - rounds


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
    except UnicodeEncodeError:  # the "replace" error handler would write "?"
        text = _SURROGATE.sub("\ufffd", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


class Undecodable(dict[str, str]):
    """What the jsonb loader gives for a value nested deeper than Python's decoder reads
    even on a stack of its own (about 990 levels; only a write by SQL stores one): an
    object saying so, shown wherever the value is. Raised on, one claimed job of such
    args failed the whole batch it was claimed in — its neighbours left running with no
    handler until rescued, and claimed again beside it (a review). A job's own args of
    this kind fail that job alone, at once (:func:`decode_args`)."""

    def __init__(self, size: int) -> None:
        super().__init__(
            awa_undecodable=f"{size} characters of JSON nested deeper than Python's JSON "
            "decoder reads (about 990 levels): read them with SQL"
        )


def decode_args(args_type: type[Any] | None, data: Any) -> Any:
    """Build the registered args type from stored JSON; dicts pass through."""
    if isinstance(data, Undecodable):
        raise SerializationError(f"cannot decode args: {data['awa_undecodable']}")
    if args_type is None or args_type is dict or not isinstance(data, dict):
        return data
    validate = getattr(args_type, "model_validate", None)
    try:
        if callable(validate):
            return validate(data)
        if dataclasses.is_dataclass(args_type):
            return _dataclass_builder(args_type)(data)
        return args_type(**data)
    except Exception as exc:
        raise SerializationError(f"cannot decode args into {args_type.__name__}: {exc}") from exc


# -- rebuilding dataclasses from JSON ---------------------------------------------------
# asdict() writes nested dataclasses as dicts, enums as their values and tuples as lists;
# the handler must get back the types its annotations name. Each dataclass gets one
# builder, made once from its type hints: fields whose JSON already is the value (str,
# int, list[str], dict[str, Any], ...) are passed through, the rest converted.

_Convert = Callable[[Any], Any]
_BUILDERS: dict[type[Any], _Convert] = {}  # finished builders only: read without the lock
_BUILDING: set[type[Any]] = set()  # classes being built, by the thread holding the lock
_BUILDERS_LOCK = threading.RLock()
_UNIONS = (typing.Union, types.UnionType)


def _dataclass_builder(cls: type[Any]) -> _Convert:
    found = _BUILDERS.get(cls)
    if found is not None:
        return found
    with _BUILDERS_LOCK:  # another thread building cls: wait for its builder
        if cls in _BUILDERS:
            return _BUILDERS[cls]
        if cls in _BUILDING:  # a field of the class's own type (a tree): looked up when used
            return lambda data: _BUILDERS[cls](data)
        _BUILDING.add(cls)
        try:
            _BUILDERS[cls] = _make_builder(cls)
        finally:
            _BUILDING.discard(cls)
        return _BUILDERS[cls]


def _make_builder(cls: type[Any]) -> _Convert:
    hints = _field_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    names = frozenset(fields)
    converted = [(n, c) for n in fields if (c := _converter(hints.get(n, Any))) is not None]

    def build(data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # not what asdict wrote: the constructor judges it
        kwargs = {k: v for k, v in data.items() if k in names}
        for name, convert in converted:
            if name in kwargs:
                kwargs[name] = convert(kwargs[name])
        return cls(**kwargs)

    return build


def _field_hints(cls: type[Any]) -> dict[str, Any]:
    """Each field's resolved annotation. One that cannot be resolved (a name imported
    only under TYPE_CHECKING, a class local to a function) leaves that field's JSON as
    it is, not the whole class's — and says so once."""
    try:
        return typing.get_type_hints(cls)
    except Exception:
        pass
    module = sys.modules.get(cls.__module__)
    namespace = {**(vars(module) if module is not None else {}), cls.__name__: cls}
    hints: dict[str, Any] = {}
    unresolved = []
    for field in dataclasses.fields(cls):
        hint = field.type
        if isinstance(hint, str):
            try:
                hint = eval(hint, namespace, dict(vars(cls)))  # the class's own annotation
            except Exception:
                unresolved.append(field.name)
                continue
        hints[field.name] = hint
    if unresolved:
        _log.warning(
            "args of %s: the annotations of %s do not resolve, so their JSON reaches the "
            "handler as it is (dicts, lists)", cls.__qualname__, ", ".join(unresolved),
        )  # fmt: skip
    return hints


def _converter(hint: Any) -> _Convert | None:
    """How to turn the JSON of a value annotated ``hint`` back into it; None when the
    JSON already is the value."""
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _converter(params[0])
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_builder(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _or_none(hint)
    if hint is float:
        return _as_float
    if origin in _UNIONS:
        members = [m for m in params if m is not type(None)]
        return _or_none(_converter(members[0])) if len(members) == 1 else None
    if hint is tuple or origin is tuple:
        return _tuple_converter(params)
    if origin in (list, Sequence, MutableSequence) and params:
        item = _converter(params[0])
        return None if item is None else _each(lambda v: [item(x) for x in v], list)
    if origin in (dict, Mapping) and len(params) == 2:
        value = _converter(params[1])
        return None if value is None else _each(lambda v: {k: value(x) for k, x in v.items()}, dict)
    return None


def _tuple_converter(params: tuple[Any, ...]) -> _Convert:
    if len(params) == 2 and params[1] is Ellipsis:
        item = _converter(params[0]) or _same
        return _each(lambda v: tuple(item(x) for x in v), list)
    if params and params != ((),):
        items = [_converter(p) or _same for p in params]
        return _each(lambda v: tuple(c(x) for c, x in zip(items, v, strict=False)), list)
    return _each(tuple, list)


def _same(value: Any) -> Any:
    return value


def _as_float(value: Any) -> Any:
    """A float field's value: jsonb keeps a number, not its type, and gives ``1e16`` back
    as the integer ``10000000000000000``."""
    return float(value) if type(value) is int else value


def _or_none(convert: _Convert | None) -> _Convert | None:
    """``convert``, leaving None (an optional field's JSON null) alone."""
    if convert is None:
        return None
    return lambda value: None if value is None else convert(value)


def _each(convert: _Convert, container: type[Any]) -> _Convert:
    """``convert`` for JSON of the ``container`` type; anything else passes through."""
    return lambda value: convert(value) if isinstance(value, container) else value
