"""JSON encoding of args and the fast jsonb loader."""

from __future__ import annotations

import pytest

from awa.db.connection import load_json
from awa.errors import SerializationError, ValidationError
from awa.serialization import MAX_JSON_DEPTH, encode_json, nested_too_deep


@pytest.mark.parametrize(
    "raw", [b"{}", b"[]", b'{"a": [1, 2, {"b": null}]}', '{"x": "\\u00e9"}', memoryview(b"[1]")]
)
def test_load_json_matches_the_standard_decoder(raw: bytes | str | memoryview) -> None:
    import json

    text = raw if isinstance(raw, str) else bytes(raw).decode()
    assert load_json(raw) == json.loads(text)


def test_empty_containers_are_fresh_objects() -> None:
    first = load_json(b"{}")
    first["k"] = 1
    assert load_json(b"{}") == {}


def test_encode_json_is_compact_and_strict() -> None:
    assert encode_json({"a": [1, 2]}) == '{"a":[1,2]}'
    with pytest.raises(SerializationError, match="args"):
        encode_json({"x": float("inf")})


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, None, True], "é": 'x\u00e9\n"q"', "n": {"deep": [{"k": -3}]}},
        [1, "two", {"three": 3.0}],
        "plain",
        {},
    ],
)
def test_encode_json_matches_the_standard_encoder(value: object) -> None:
    import json

    assert encode_json(value) == json.dumps(value, separators=(",", ":"))


def test_a_cycle_is_a_serialization_error_not_a_hang() -> None:
    looped: dict[str, object] = {}
    looped["self"] = looped
    with pytest.raises(SerializationError, match="nested too deeply"):
        encode_json(looped)


def test_a_dataclass_inside_dict_args_is_encoded_as_a_dict() -> None:
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int

    assert encode_json({"p": Point(3)}) == '{"p":{"x":3}}'


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_json_deeper_than_the_limit_is_refused_naming_the_field() -> None:
    encode_json({"x": _nested(MAX_JSON_DEPTH - 1)}, what="payload")  # the object is one level
    with pytest.raises(ValidationError, match=r"^payload: nests .* more than 256 levels"):
        encode_json({"x": _nested(MAX_JSON_DEPTH)}, what="payload")


@pytest.mark.parametrize(
    ("text", "deeper_than_2"),
    [("[[1]]", False), ("[[[1]]]", True), ('[["[[[[", 1]]', False),
     ('[{"k": "\\"[[[["}]', False), ('[1, [2], [3], {"a": 4}]', False)],
)  # fmt: skip
def test_depth_counts_brackets_outside_strings_only(text: str, deeper_than_2: bool) -> None:
    assert nested_too_deep(text, 2) is deeper_than_2


def test_many_shallow_containers_are_not_too_deep() -> None:
    rows = [{"id": i, "tags": ["a"]} for i in range(1_000)]
    assert encode_json(rows).startswith("[{")


def _on_a_deep_stack(levels: int, call: object) -> object:
    return _on_a_deep_stack(levels - 1, call) if levels else call()  # type: ignore[operator]


def test_json_too_deep_for_the_callers_stack_is_still_read() -> None:
    """Rows stored before the limit (or by SQL) are read from wherever the caller is: 960
    levels failed every list_jobs of their queue (a review)."""
    text = "[" * 900 + "]" * 900
    value = _on_a_deep_stack(300, lambda: load_json(text.encode()))
    depth = 0
    while isinstance(value, list) and value:
        value, depth = value[0], depth + 1
    assert depth == 899


def test_messages_awa_writes_replace_what_postgresql_cannot_store_with_u_fffd() -> None:
    """An unpaired surrogate became "?" (the "replace" error handler's), not U+FFFD as
    documented (a review)."""
    from awa.serialization import storable_text

    assert storable_text("nul:\x00 lone:\ud800 pair:\U0001f600") == (
        "nul:\ufffd lone:\ufffd pair:\U0001f600"
    )
