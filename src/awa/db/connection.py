"""How awa sets up each pooled connection."""

from __future__ import annotations

import json
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import set_json_loads

_decode = json.JSONDecoder().decode


def load_json(data: bytes | bytearray | memoryview | str) -> Any:
    """jsonb → Python, faster than the default for the values awa reads most.

    Empty objects and arrays (metadata, errors of a fresh job) skip the decoder, and
    bytes are decoded to str first so ``json`` need not sniff their encoding.
    """
    if isinstance(data, str):
        return _decode(data)
    raw = bytes(data)
    if raw == b"{}":
        return {}
    if raw == b"[]":
        return []
    return _decode(raw.decode())


async def configure(conn: AsyncConnection[Any]) -> None:
    """Pool ``configure`` hook: install the JSON loader on a new connection."""
    set_json_loads(load_json, conn)
