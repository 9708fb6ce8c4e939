"""JSON encoding of args and the fast jsonb loader."""

from __future__ import annotations

import pytest

from awa.db.connection import load_json
from awa.errors import SerializationError
from awa.serialization import encode_json


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
