"""``listen_url``: validated like the database URL and naming its own field; taken from
``AWA_LISTEN_URL`` when not given; never echoed."""

from __future__ import annotations

import pytest

import awa

DB = "postgresql://app@db.internal/app"


@pytest.mark.parametrize("bad", ["", "   ", "http://x/y", "postgresql://u:s3cret@[::1", 42])
def test_a_bad_listen_url_is_a_validation_error_naming_it(bad: object) -> None:
    with pytest.raises(awa.ValidationError) as caught:
        awa.AsyncClient(DB, listen_url=bad)  # type: ignore[arg-type]
    assert caught.value.field == "listen_url"
    assert "s3cret" not in str(caught.value)


def test_listen_url_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert awa.AsyncClient(DB).listen_url is None
    monkeypatch.setenv("AWA_LISTEN_URL", "postgresql://app@db-direct/app")
    assert awa.AsyncClient(DB).listen_url == "postgresql://app@db-direct/app"
    explicit = awa.AsyncClient(DB, listen_url="postgresql://app@other/app")
    assert explicit.listen_url == "postgresql://app@other/app"
    with awa.Client(DB) as sync:
        assert sync.async_client.listen_url == "postgresql://app@db-direct/app"
