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
