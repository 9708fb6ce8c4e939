"""``awa.cli.main.main`` called by an application (argv given) leaves the process alone at
the end; only the ``awa`` command itself (argv None) exits past threads left running."""

from __future__ import annotations

import sys

import pytest

import awa.cli.main as cli_main


def test_only_the_awa_command_itself_checks_for_threads_left_running(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An application's idle executor, grown while a command ran, made the command
    os._exit the whole application (a review)."""
    checked: list[int] = []
    monkeypatch.setattr(cli_main, "leave_stray_threads", lambda _b, status: checked.append(status))
    assert cli_main.main(["queue", "list", "--database-url", database_url]) == 0
    assert checked == []
    monkeypatch.setattr(sys, "argv", ["awa", "queue", "list", "--database-url", database_url])
    assert cli_main.main() == 0
    assert checked == [0]
    capsys.readouterr()
