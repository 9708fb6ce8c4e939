"""build_spec rejects every bad producer argument with a typed error naming the field."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import awa
from awa.client.insert import build_spec


@dataclasses.dataclass
class SendEmail:
    to: str


def test_defaults_follow_the_contract() -> None:
    spec = build_spec(SendEmail("a@example.com"))
    assert (spec.kind, spec.queue, spec.priority, spec.max_attempts) == (
        "send_email", "default", 2, 25,
    )  # fmt: skip
    assert spec.tags == [] and spec.metadata == {} and spec.unique_key is None


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"priority": 0}, "priority"),
        ({"priority": 5}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"tags": "not-a-list"}, "tags"),
        ({"tags": [""]}, "tags[]"),
        ({"queue": "q" * 201}, "queue"),
        ({"queue": ""}, "queue"),
        ({"queue": "   "}, "queue"),
        ({"kind": "\t"}, "kind"),
        ({"kind": "k" * 201}, "kind"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at"),
        ({"run_at": "2030-01-01"}, "run_at"),
        ({"run_at": datetime.max.replace(tzinfo=ZoneInfo("America/New_York"))}, "run_at"),
        ({"run_at": datetime(1, 1, 1, 5, tzinfo=timezone(timedelta(hours=6)))}, "run_at"),
        ({"run_at": datetime(9999, 12, 31, tzinfo=UTC)}, "run_at"),
        ({"metadata": ["not", "a", "dict"]}, "metadata"),
        ({"unique_opts": {"by_period": 0}}, "unique_opts.by_period"),
        ({"unique_opts": {"states": ["bogus"]}}, "unique_opts.states"),
        ({"unique_opts": {"nope": True}}, "unique_opts"),
    ],
)
def test_out_of_range_values_name_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(awa.ValidationError) as info:
        build_spec(SendEmail("a@example.com"), **options)
    assert info.value.field == field
    assert field in str(info.value)


def test_dict_args_require_a_kind() -> None:
    with pytest.raises(awa.ValidationError, match="kind"):
        build_spec({"to": "a@example.com"})
    assert build_spec({"to": "x"}, kind="send_email").kind == "send_email"


def test_non_serialisable_args_raise_serialization_error() -> None:
    with pytest.raises(awa.SerializationError):
        build_spec({"when": object()}, kind="k")
    with pytest.raises(awa.SerializationError):
        build_spec({"nan": float("nan")}, kind="k")
    with pytest.raises(awa.SerializationError):
        build_spec(42)


def test_aware_run_at_and_valid_tags_pass() -> None:
    far = datetime(9999, 12, 1, tzinfo=ZoneInfo("Asia/Kathmandu"))
    assert build_spec(SendEmail("x"), run_at=far).run_at == far
    when = datetime(2030, 1, 1, tzinfo=UTC)
    spec = build_spec(SendEmail("x"), run_at=when, tags=["a"] * 20, priority=1, max_attempts=1000)
    assert spec.run_at == when and len(spec.tags) == 20


def test_unique_key_depends_on_the_chosen_parts() -> None:
    a = build_spec(SendEmail("x"), unique_opts={}).unique_key
    b = build_spec(SendEmail("y"), unique_opts={}).unique_key
    c = build_spec(SendEmail("y"), unique_opts={"by_args": False}).unique_key
    d = build_spec(SendEmail("x"), unique_opts={"by_args": False}).unique_key
    e = build_spec(SendEmail("x"), queue="other", unique_opts={"by_queue": True}).unique_key
    assert a != b and c == d and e != a
    assert (
        build_spec(SendEmail("x"), unique_opts={}).unique_states == "11111001"
    )  # waiting_external too
