"""Every SQL file is named in awa.db.sql, every name has a file, and every file says why."""

from __future__ import annotations

from importlib import resources

from awa.db import sql


def test_every_query_file_is_used_and_documented() -> None:
    files = {
        entry.name.removesuffix(".sql"): entry.read_text("utf-8")
        for entry in resources.files("awa.sql.queries").iterdir()
        if entry.name.endswith(".sql")
    }
    constants = {name.lower(): value for name, value in vars(sql).items() if name.isupper()}
    assert set(files) == set(constants)
    for name, text in files.items():
        assert text == constants[name]
        assert text.startswith(f"-- {name}"), f"{name}.sql must open with a comment naming it"
