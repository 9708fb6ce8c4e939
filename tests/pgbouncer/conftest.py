"""A real PgBouncer in transaction pooling mode in front of the test server.

PgBouncer comes from Debian (``pgbouncer``); ``make test`` installs it where it can
(``.ci/system-deps``). Without it every test here is skipped with that reason. One
PgBouncer serves the session: it maps every database name to the server under test, so
each test reaches its own fresh database through it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from awa.embedded import SYSTEM_USER
from tests.conftest import PgServer

SBIN = ("/usr/sbin", "/usr/local/sbin")  # where Debian puts it, often off a user's PATH
POOL_SIZE = 4  # server connections per database: fewer than a worker's pool, to multiplex


@dataclass
class Bouncer:
    """A running PgBouncer and how to reach a database through it."""

    port: int

    def url_for(self, direct_url: str) -> str:
        """``direct_url`` with PgBouncer as its host."""
        params = conninfo.conninfo_to_dict(direct_url)
        params.update(host="127.0.0.1", port=str(self.port))
        return conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def _find_pgbouncer() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((f"{d}/pgbouncer" for d in SBIN if os.access(f"{d}/pgbouncer", os.X_OK)), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ini(server: dict[str, str], port: int) -> str:
    target = " ".join(
        f"{key}={server[key]}" for key in ("host", "port", "user", "password") if server.get(key)
    )
    return f"""
[databases]
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 2000
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile =
pidfile =
"""


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[Bouncer]:
    binary = _find_pgbouncer()
    if binary is None:
        pytest.skip(
            "pgbouncer not found and `make test` could not install it: apt-get install -y pgbouncer"
        )
    server = conninfo.conninfo_to_dict(pg_server.admin_url)
    server.setdefault("host", "127.0.0.1")
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
    workdir.chmod(0o755)
    ini = workdir / "pgbouncer.ini"
    ini.write_text(_ini({k: str(v) for k, v in server.items()}, port))
    ini.chmod(0o644)
    # PgBouncer refuses to run as root: then it runs as the embedded server's user.
    as_user = ["-u", SYSTEM_USER] if os.geteuid() == 0 else []
    log = (workdir / "pgbouncer.log").open("w")
    proc = subprocess.Popen([binary, *as_user, str(ini)], stdout=log, stderr=log)
    bouncer = Bouncer(port)
    try:
        _wait_ready(bouncer, pg_server, proc, workdir)
        yield bouncer
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_ready(
    bouncer: Bouncer, pg_server: PgServer, proc: subprocess.Popen[bytes], workdir: Path
) -> None:
    deadline = time.monotonic() + 30
    url = bouncer.url_for(pg_server.admin_url)
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (workdir / "pgbouncer.log").read_text()
                pytest.skip(f"pgbouncer did not start: {log.strip()[-500:]}")
            time.sleep(0.05)


@pytest.fixture
def bouncer_url(pgbouncer: Bouncer, database_url: str) -> str:
    """This test's fresh database, reached through PgBouncer (transaction mode)."""
    return pgbouncer.url_for(database_url)
