"""The dashboard's templates, read as text: what a static look can hold them to."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "src" / "awa" / "dashboard" / "templates"


def test_every_form_value_is_written_as_it_is() -> None:
    """Values shown are written with their bidirectional controls spelt out (``finalize``);
    a form field's value goes back to the server and must keep them, so each is marked
    ``raw`` (four fields of the queue page were not: their actions named another queue)."""
    unmarked = [
        f"{path.name}: {value}"
        for path in sorted(TEMPLATES.glob("*.html"))
        for value in re.findall(r'value="\{\{.*?\}\}"', path.read_text())
        if not value.endswith('| raw }}"')
    ]
    assert unmarked == []
