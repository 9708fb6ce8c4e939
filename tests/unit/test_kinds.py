from __future__ import annotations

import dataclasses

import pytest

import awa


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("SMTPEmail", "smtp_email"),
        ("HTTPRequestV2", "http_request_v2"),
        ("Job", "job"),
        ("ABC", "abc"),
        ("sendEmail", "send_email"),
        ("IOError", "io_error"),
    ],
)
def test_derive_kind_is_acronym_aware_snake_case(name: str, kind: str) -> None:
    assert awa.derive_kind(name) == kind


def test_derive_kind_accepts_a_class() -> None:
    @dataclasses.dataclass
    class SMTPEmail:
        to: str

    assert awa.derive_kind(SMTPEmail) == "smtp_email"


def test_a_kind_that_is_no_name_is_a_validation_error_not_a_type_error() -> None:
    with pytest.raises(awa.ValidationError) as info:
        awa.derive_kind(5)  # type: ignore[arg-type]
    assert info.value.field == "args_type"
    client = awa.AsyncClient("postgresql://u@127.0.0.1:1/db")
    with pytest.raises(awa.ValidationError) as info:
        client.task(5)(lambda job: None)  # type: ignore[arg-type]
    assert info.value.field == "args_type"
    for kind in ([], {}):  # looked up as a dict key before it was checked: unhashable
        with pytest.raises(awa.ValidationError) as info:
            client.registry.job_defaults({}, kind, None)
        assert info.value.field == "kind"
