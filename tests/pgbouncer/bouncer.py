"""Start a real PgBouncer (transaction pooling) in front of a PostgreSQL server: used by
the PgBouncer tests and by ``bench/connection_budget.py``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import conninfo

from awa.embedded import SYSTEM_USER

SBIN = ("/usr/sbin", "/usr/local/sbin")  # where Debian puts it, often off a user's PATH


class BouncerError(Exception):
    """PgBouncer is missing or did not start (the message says which, and why)."""


def find_pgbouncer() -> str | None:
    """The pgbouncer binary, on PATH or in an sbin directory."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((f"{d}/pgbouncer" for d in SBIN if os.access(f"{d}/pgbouncer", os.X_OK)), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """One PgBouncer mapping every database name to the server of ``server_url``."""

    def __init__(self, server_url: str, *, pool_size: int, pool_mode: str = "transaction"):
        self.server = {k: str(v) for k, v in conninfo.conninfo_to_dict(server_url).items()}
        self.server.setdefault("host", "127.0.0.1")
        self.pool_size = pool_size
        self.pool_mode = pool_mode
        self.port = _free_port()
        self._workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def url_for(self, direct_url: str) -> str:
        """``direct_url`` with PgBouncer as its host."""
        params = conninfo.conninfo_to_dict(direct_url)
        params.update(host="127.0.0.1", port=str(self.port))
        return conninfo.make_conninfo(**params)  # type: ignore[arg-type]

    def _ini(self) -> str:
        target = " ".join(
            f"{k}={self.server[k]}"
            for k in ("host", "port", "user", "password")
            if k in self.server
        )
        return (
            f"[databases]\n* = {target}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\nunix_socket_dir =\nauth_type = any\n"
            f"pool_mode = {self.pool_mode}\ndefault_pool_size = {self.pool_size}\n"
            "max_client_conn = 2000\nserver_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits\nlogfile =\npidfile =\n"
        )

    def start(self, timeout_s: float = 30) -> PgBouncer:
        """Start it and wait until it answers; BouncerError when it cannot."""
        binary = find_pgbouncer()
        if binary is None:
            raise BouncerError("pgbouncer not found: apt-get install -y pgbouncer")
        self._workdir = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
        self._workdir.chmod(0o755)
        ini = self._workdir / "pgbouncer.ini"
        ini.write_text(self._ini())
        ini.chmod(0o644)
        # PgBouncer refuses to run as root: then it runs as the embedded server's user.
        as_user = ["-u", SYSTEM_USER] if os.geteuid() == 0 else []
        with (self._workdir / "pgbouncer.log").open("w") as log:
            self._proc = subprocess.Popen([binary, *as_user, str(ini)], stdout=log, stderr=log)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None and self._workdir is not None
        deadline = time.monotonic() + timeout_s
        url = self.url_for(conninfo.make_conninfo(**self.server))
        while True:
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    log = (self._workdir / "pgbouncer.log").read_text().strip()
                    self.stop()
                    raise BouncerError(f"pgbouncer did not start: {log[-500:]}") from None
                time.sleep(0.05)  # poll until it listens, bounded by the deadline

    def stop(self) -> None:
        """Stop it and remove its files. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
