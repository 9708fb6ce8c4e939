"""Every SQL file is named in awa.db.sql, every name has a file, and every file says why."""

from __future__ import annotations

from importlib import resources

import pytest

from awa.db import sql

# Statements made from another file's text less marked parts (awa.db.sql.without).
DERIVED: dict[str, tuple[str, str | tuple[str, ...]]] = {
    "job_insert": ("job_insert", "unique"),
    "job_insert_unique": ("job_insert", ()),  # the whole file, named for what it adds
    "job_insert_unseated": ("job_insert", ("unique", "seat")),
    "job_insert_unique_unseated": ("job_insert", "seat"),
    "job_retry_failed": ("job_retry_failed", "count"),
    "job_retry_failed_count": ("job_retry_failed", "rows"),
    "dlq_retry": ("dlq_retry", "count"),
    "dlq_retry_count": ("dlq_retry", "rows"),
    "job_heartbeat_many": ("job_attempt_writes", "progress"),
    "job_progress_many": ("job_attempt_writes", "beat"),
}
# Files that are only ever used less a part (no statement is the whole file).
ONLY_IN_PARTS = {"job_insert", "job_list", "job_retry_failed", "dlq_retry", "job_attempt_writes"}


def test_every_query_file_is_used_and_documented() -> None:
    files = {
        entry.name.removesuffix(".sql"): entry.read_text("utf-8")
        for entry in resources.files("awa.sql.queries").iterdir()
        if entry.name.endswith(".sql")
    }
    constants = {
        name.lower(): value
        for name, value in vars(sql).items()
        if name.isupper() and isinstance(value, str)  # not WHOLE_ROWS, a set of them
    }
    for name, (source, parts) in DERIVED.items():
        text = files[source]
        for part in (parts,) if isinstance(parts, str) else parts:
            text = sql.without(text, part)  # raises unless the part is there once
        assert constants.pop(name) == text
    assert set(files) - ONLY_IN_PARTS == set(constants)
    for name, text in files.items():
        assert name in ONLY_IN_PARTS or text == constants[name]
        assert text.startswith(f"-- {name}"), f"{name}.sql must open with a comment naming it"


def test_without_drops_exactly_the_marked_lines() -> None:
    query = "SELECT 1\n    -- opt {\n    , 2\n    -- } opt\nFROM t\n"
    assert sql.without(query, "opt") == "SELECT 1\nFROM t\n"


def test_without_refuses_a_statement_lacking_the_part() -> None:
    with pytest.raises(ValueError, match="no single 'seat' part"):
        sql.without("SELECT 1\n", "seat")


def test_the_unseated_insert_still_wakes_the_queue() -> None:
    seated = sql.JOB_INSERT[sql.JOB_INSERT.index("INSERT INTO") :]
    unseated = sql.JOB_INSERT_UNSEATED[sql.JOB_INSERT_UNSEATED.index("INSERT INTO") :]
    assert "handoff_seats" in seated and "take_seat" in seated
    assert "handoff_seats" not in unseated and "take_seat" not in unseated
    assert "pg_notify('awa_available', j.queue)" in unseated


def test_no_statement_filters_by_not_in_a_subquery() -> None:
    """``x NOT IN (SELECT …)`` is a hashed lookup only while PostgreSQL expects the set to
    fit in work_mem; past it, the subquery is scanned again for every row: a DLQ retry of
    500 000 entries ran for over 20 minutes (a review), 13 s as NOT EXISTS."""
    import re

    for entry in resources.files("awa.sql.queries").iterdir():
        if entry.name.endswith(".sql"):
            text = entry.read_text("utf-8")
            assert not re.search(r"NOT\s+IN\s*\(\s*SELECT", text, re.I), entry.name


@pytest.mark.parametrize("summaries", [False, True])
def test_a_job_listing_names_exactly_the_filters_given(summaries: bool) -> None:
    """Filters not given are left out of the statement, not written "IS NULL OR …": the
    planner then sees the values and picks the partial index a state or queue has."""
    names = ("state", "kind", "queue")
    for mask in range(8):
        given = frozenset(n for i, n in enumerate(names) if mask >> i & 1)
        query = sql.job_list(summaries=summaries, given=given)
        assert "IS NULL" not in query
        for name in names:
            assert (f"%({name})s" in query) is (name in given)
        assert ("last_error" in query) is summaries
