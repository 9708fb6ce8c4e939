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
