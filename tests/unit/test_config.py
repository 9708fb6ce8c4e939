"""Start-time validation: every bad setting raises its BuildError naming the field."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import awa
from awa.config import build_worker_config, parse_override_refresh_ms, resolve_database_url


def test_tuple_dict_and_dataclass_forms_agree() -> None:
    config = build_worker_config(
        [("a", 5), {"name": "b", "max_workers": 7, "rate_limit": [2.5, 0]}, awa.QueueConfig("c")]
    )
    a, b, c = config.queues
    assert (a.name, a.max_workers) == ("a", 5)
    assert (b.max_workers, b.rate, b.burst) == (7, 2.5, 3)
    assert c == awa.QueueConfig("c", poll_interval_ms=200)  # the worker's default
    assert c.max_workers == 50 and c.claim_batch_size == 512 and c.deadline_ms == 300_000
    assert config.total_permits == 62 and not config.weighted


def test_start_poll_interval_reaches_every_form_that_sets_none_of_its_own() -> None:
    """A QueueConfig kept its own default (200) whatever start() was given."""
    config = build_worker_config(
        [awa.QueueConfig("a"), awa.QueueConfig("b", poll_interval_ms=50), ("c", 1),
         {"name": "d", "poll_interval_ms": 70}, {"name": "e", "poll_interval_ms": None}],
        poll_interval_ms=1_000,
    )  # fmt: skip
    assert [q.poll_interval_ms for q in config.queues] == [1_000, 50, 1_000, 70, 1_000]


@pytest.mark.parametrize(
    ("queues", "options", "error", "field"),
    [
        ([], {}, awa.NoQueuesConfigured, "queues"),
        ([("a", 1), ("a", 2)], {}, awa.DuplicateQueue, "queues['a']"),
        ([awa.QueueConfig("a", min_workers=3), awa.QueueConfig("b", min_workers=3)],
         {"global_max_workers": 5}, awa.MinWorkersExceedGlobal, "min_workers"),
        ([awa.QueueConfig("a", weight=0)], {"global_max_workers": 5}, awa.InvalidWeight,
         "queues['a'].weight"),
        ([awa.QueueConfig("a", rate_limit=(0, 1))], {}, awa.InvalidRateLimit,
         "queues['a'].rate_limit"),
        ([awa.QueueConfig("a", rate_limit=(-1.0, 0))], {}, awa.InvalidRateLimit,
         "queues['a'].rate_limit"),
        ([awa.QueueConfig("a", claim_batch_size=0)], {}, awa.InvalidClaimBatchSize,
         "queues['a'].claim_batch_size"),
        ([("a", 0)], {}, awa.InvalidWorkers, "queues['a'].max_workers"),
        ([("a", -1)], {}, awa.InvalidWorkers, "queues['a'].max_workers"),
        ([awa.QueueConfig("a", min_workers=-1)], {}, awa.InvalidWorkers,
         "queues['a'].min_workers"),
        ([("a", 1)], {"global_max_workers": 0}, awa.InvalidWorkers, "global_max_workers"),
        ([(" ", 1)], {}, awa.InvalidSetting, "queues[' '].name"),
        ([("a", 1)], {"dlq_retention_ms": 2**62}, awa.InvalidSetting, "dlq_retention_ms"),
        ([("a", 1)], {"handoff_seats": 2**31}, awa.InvalidSetting, "handoff_seats"),
        ([awa.QueueConfig("a", deadline_ms=2**31)], {}, awa.InvalidSetting,
         "queues['a'].deadline_ms"),
        ([awa.QueueConfig("a", weight=2**31)], {"global_max_workers": 4}, awa.InvalidWeight,
         "queues['a'].weight"),
        ([awa.QueueConfig("a", claim_batch_size=2**31)], {}, awa.InvalidClaimBatchSize,
         "queues['a'].claim_batch_size"),
        ([("a", 1)], {"poll_interval_ms": 0}, awa.InvalidSetting, "poll_interval_ms"),
        ([("a", 1)], {"heartbeat_interval_ms": 0}, awa.InvalidSetting, "heartbeat_interval_ms"),
        ([("a", 1)], {"bogus": 1}, awa.InvalidSetting, "start"),
        ([{"max_workers": 1}], {}, awa.InvalidSetting, "queues"),
        ("email", {}, awa.InvalidSetting, "queues"),  # not five queues e, m, a, i, l
        ({"email": 10}, {}, awa.InvalidSetting, "queues"),
        ({"name": "email", "max_workers": 10}, {}, awa.InvalidSetting, "queues"),
        ([{"name": "a", "nope": 1}], {}, awa.InvalidSetting, "queues"),
        ([awa.QueueConfig("a", deadline_ms=-1)], {}, awa.InvalidSetting, "queues['a'].deadline_ms"),
        ([("a", 1)], {"heartbeat_interval_ms": 1000, "heartbeat_staleness_ms": 1000},
         awa.InvalidSetting, "heartbeat_staleness_ms"),
        # Silent between reports for longer than the 30 s a live worker has: it looked
        # stopped to explain and the fleet pool (a review).
        ([("a", 1)], {"runtime_snapshot_interval_ms": 10_001}, awa.InvalidSetting,
         "runtime_snapshot_interval_ms"),
    ],
)  # fmt: skip
def test_invalid_configuration_names_the_field(
    queues: list[Any], options: dict[str, Any], error: type[awa.BuildError], field: str
) -> None:
    with pytest.raises(error) as info:
        build_worker_config(queues, **options)
    assert info.value.field == field
    assert isinstance(info.value, awa.BuildError)


def test_min_workers_exceed_global_carries_its_numbers() -> None:
    with pytest.raises(awa.MinWorkersExceedGlobal) as info:
        build_worker_config(
            [awa.QueueConfig("a", min_workers=4), awa.QueueConfig("b", min_workers=4)],
            global_max_workers=6,
        )
    assert (info.value.total_min, info.value.global_max) == (8, 6)


def test_weighted_mode_total_is_the_global_cap() -> None:
    config = build_worker_config(
        [awa.QueueConfig("a", min_workers=2), awa.QueueConfig("b")], global_max_workers=10
    )
    assert config.weighted and config.total_permits == 10


@pytest.mark.parametrize(
    ("raw", "value", "warns"),
    [(None, 10_000, False), ("", 10_000, False), ("250", 250, False), ("10", 50, True),
     ("abc", 10_000, True), ("1.5", 10_000, True)],
)  # fmt: skip
def test_override_refresh_env_is_floored_and_validated(
    raw: str | None, value: int, warns: bool
) -> None:
    parsed, warning = parse_override_refresh_ms(raw)
    assert parsed == value
    assert (warning is not None) == warns


@pytest.mark.parametrize(("given", "value"), [(1, 50), (49, 50), (50, 50), (60_000, 60_000)])
def test_override_refresh_given_to_start_has_the_same_floor_as_the_environment(
    given: int, value: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="awa"):
        config = build_worker_config([("q", 1)], override_refresh_ms=given)
    assert config.override_refresh_ms == value
    floored = [r for r in caplog.records if "floor" in r.getMessage()]
    assert len(floored) == (1 if given < 50 else 0)
    assert floored == [] or "override_refresh_ms" in floored[0].getMessage()


def test_database_url_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert resolve_database_url(None) is None
    monkeypatch.setenv("DATABASE_URL", "postgresql://d")
    assert resolve_database_url(None) == "postgresql://d"
    monkeypatch.setenv("AWA_DATABASE_URL", "postgresql://a")
    assert resolve_database_url(None) == "postgresql://a"
    assert resolve_database_url("postgresql://x") == "postgresql://x"


def test_client_without_any_url_is_a_validation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(awa.NoDatabaseUrl, match="database_url"):  # a ValidationError
        awa.AsyncClient()
    with pytest.raises(awa.ValidationError) as bad:
        awa.AsyncClient("host=db port=notaport dbname")
    assert not isinstance(bad.value, awa.NoDatabaseUrl)  # a URL, if a bad one


def test_vacuum_dead_rows_may_be_zero_to_switch_the_vacuum_off_but_not_negative() -> None:
    assert build_worker_config([("q", 1)]).vacuum_dead_rows == 20_000
    assert build_worker_config([("q", 1)], vacuum_dead_rows=0).vacuum_dead_rows == 0
    with pytest.raises(awa.InvalidSetting, match="vacuum_dead_rows"):
        build_worker_config([("q", 1)], vacuum_dead_rows=-1)
    with pytest.raises(awa.InvalidSetting, match="vacuum_dead_rows"):
        build_worker_config([("q", 1)], vacuum_dead_rows="many")


def test_start_settings_type_names_every_worker_setting_with_its_type() -> None:
    """StartSettings (what a type checker holds start()'s keywords to) and WorkerConfig
    (what start() builds) must not drift: a setting missing from the type would be a type
    error for a correct program, one too many a setting start() refuses."""
    from dataclasses import fields
    from typing import get_type_hints

    from awa.config import START_SETTINGS, StartSettings, WorkerConfig

    built = {f.name for f in fields(WorkerConfig)} - {"queues", "global_max_workers"}
    assert built | {"poll_interval_ms"} == START_SETTINGS
    typed, stored = get_type_hints(StartSettings), get_type_hints(WorkerConfig)
    assert {name: typed[name] for name in built} == {name: stored[name] for name in built}
    assert typed["poll_interval_ms"] is int
