"""COPY text-format encoding of job rows."""

from __future__ import annotations

from datetime import UTC, datetime

from awa.client import copy_rows


def test_text_escapes_what_copy_would_misread() -> None:
    assert copy_rows.text("a\tb\nc\rd\\e") == "a\\tb\\nc\\rd\\\\e"
    assert copy_rows.text("plain") == "plain"


def test_json_only_doubles_backslashes() -> None:
    assert copy_rows.json_text('{"a":"x\\ny"}') == '{"a":"x\\\\ny"}'
    assert copy_rows.json_text('{"a":1}') == '{"a":1}'


def test_arrays_quote_every_element() -> None:
    assert copy_rows.text_array([]) == "{}"
    assert copy_rows.text_array(["a", 'b"c', "d,e"]) == '{"a","b\\\\"c","d,e"}'


def test_nulls_bytes_and_timestamps() -> None:
    assert copy_rows.optional(None) == "\\N"
    assert copy_rows.bytea(None) == "\\N"
    assert copy_rows.bytea(b"\x01\xff") == "\\\\x01ff"
    when = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert copy_rows.timestamp(when) == "2026-01-02T03:04:05.000006+00:00"
