"""The dashboard on a hot standby: ``awa serve --read-only`` against a streaming replica
of the test server serves every page from it, and a read-only CLI command works there.

The replica is made with ``pg_basebackup -R`` from the embedded server's own binaries;
with an external DATABASE_URL there is none to make, and the test is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import conninfo

import awa
from awa.embedded import EmbeddedPostgres, bin_dir
from tests.acceptance.conftest import Awa
from tests.acceptance.support import http, start_serve, stop_serve
from tests.conftest import PgServer
from tests.helpers import wait_until

pytestmark = pytest.mark.slow


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def replica_url(pg_server: PgServer, database_url: str) -> Iterator[str]:
    """``database_url``'s database on a streaming replica of the test server."""
    primary = pg_server.embedded
    if primary is None:
        pytest.skip("an external DATABASE_URL: no embedded server to make a replica of")
    user = "embedded_postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="awa-replica-"))
    data = root / "pgdata"
    if user is not None:
        root.chmod(0o755)
        shutil.chown(root, user=user, group=user)
    source = conninfo.conninfo_to_dict(pg_server.admin_url)
    subprocess.run(
        [str(bin_dir() / "pg_basebackup"), "-D", str(data), "-R", "-X", "stream",
         "-h", str(source["host"]), "-p", str(source["port"]), "-U", "postgres", "--no-sync"],
        check=True, capture_output=True, timeout=120, user=user,
    )  # fmt: skip
    # The copy carries the primary's settings (a standby needs max_connections and the
    # like at least as high), its port and its socket directory: give it its own two.
    conf = data / "postgresql.awa.conf"
    moved = {"port": str(_free_port()), "unix_socket_directories": f"'{data}'"}
    lines = [line for line in conf.read_text().splitlines() if line.split(" ")[0] not in moved]
    conf.write_text(
        "".join(f"{line}\n" for line in lines)
        + "".join(f"{key} = {value}\n" for key, value in moved.items())
    )
    replica = EmbeddedPostgres(data)
    try:
        replica.start()
        yield replica.url(str(conninfo.conninfo_to_dict(database_url)["dbname"]))
    finally:
        replica.destroy()
        shutil.rmtree(root, ignore_errors=True)


def test_the_dashboard_serves_every_page_from_a_replica(
    database_url: str, replica_url: str, awa_cli: Awa
) -> None:
    with awa.Client(database_url) as primary:
        job = primary.insert({"n": 1}, kind="shown_on_replica", queue="replicated")
        primary.pause_queue("replicated", paused_by="ops")
    with awa.Client(replica_url) as replica:

        def caught_up() -> Any:
            return any(s.queue == "replicated" and s.paused for s in replica.queue_stats())

        wait_until(caught_up, timeout=30)
    proc, base = start_serve(replica_url, "--read-only")
    try:
        for path in ("", "queues/replicated", "jobs", f"jobs/{job.id}", "runtime", "healthz"):
            status, body = http(base + path)
            assert status == 200, (path, body[:300])
        assert "shown_on_replica" in http(base + "jobs")[1]
        assert "replicated" in http(base)[1]
    finally:
        stop_serve(proc)
    stats = awa_cli("queue", "stats", "--json", url=replica_url)
    assert stats.returncode == 0, stats.stderr
    assert any(row["queue"] == "replicated" and row["paused"] for row in stats.json())
