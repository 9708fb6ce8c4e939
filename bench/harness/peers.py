"""Who is benchmarked, and the virtualenv each one runs in.

awa runs from the project's own interpreter (``sys.executable``, i.e. /work/main/.venv);
every peer gets ``bench/.venvs/<name>``, created on first use and installed from PyPI with
exact pins, so a run on a fresh machine measures the same versions.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
VENVS = BENCH / ".venvs"
ADAPTERS = BENCH / "adapters"


@dataclass(frozen=True)
class Peer:
    """One system under test and how to run its adapter."""

    name: str
    adapter: str
    packages: tuple[str, ...] = ()  # empty: run in awa's own venv
    min_python: tuple[int, int] = (3, 11)
    extra_args: tuple[str, ...] = ()
    role: str = "peer"  # "awa" (the system judged), "peer", or "reference" (not a peer)
    venv_name: str = field(default="")
    # The workloads it takes part in; W1, W2 and W3 are the side-by-side core.
    workloads: frozenset[str] = frozenset({"W1", "W2", "W3"})

    @property
    def venv(self) -> Path:
        return VENVS / (self.venv_name or self.name)


# W1×P and W5 run the peers the issue names (pgqueuer, procrastinate): scale-out is
# measured against them; W4, W6 and idle measure awa's own features.
SCALE = frozenset({"W1", "W2", "W3", "W1xP", "W5"})
ALL = frozenset({"W1", "W2", "W3", "W1xP", "W5", "W4", "W6", "idle"})

PEERS = [
    Peer("awa", "awa_adapter.py", role="awa", workloads=ALL),
    Peer(
        "awa (durable)",
        "awa_adapter.py",
        extra_args=("--durable",),
        role="awa",
        workloads=frozenset({"W1", "W2"}),  # inserts are the same as awa's
    ),
    Peer(
        "awa (uvloop)",
        "awa_adapter.py",
        packages=("-e", str(REPO), "uvloop==0.23.0"),
        extra_args=("--uvloop",),
        role="awa",
        venv_name="awa-uvloop",
    ),
    Peer("awa-pg", "awa_pg_adapter.py", packages=("awa-pg==0.6.9",)),
    Peer(
        "pgqueuer",
        "pgqueuer_adapter.py",
        packages=("pgqueuer==1.6.0", "asyncpg==0.32.0", "uvloop==0.23.0"),
        workloads=SCALE,
    ),
    Peer(
        "pgqueuer (no limit)",
        "pgqueuer_adapter.py",
        packages=("pgqueuer==1.6.0", "asyncpg==0.32.0", "uvloop==0.23.0"),
        extra_args=("--unbounded",),
        role="reference",
        venv_name="pgqueuer",
    ),
    Peer(
        "procrastinate",
        "procrastinate_adapter.py",
        packages=("procrastinate==3.10.0", "psycopg[binary]"),
        workloads=SCALE,
    ),
    Peer("oban", "oban_adapter.py", packages=("oban==0.7.0",), min_python=(3, 12)),
    Peer("chancy", "chancy_adapter.py", packages=("chancy==0.26.0", "psycopg[binary]")),
]

TOOLS = Peer("tools", "", packages=("matplotlib==3.11.2", "py-spy==0.4.3"))


class PeerUnavailable(Exception):
    """The peer cannot run on this machine (say, no suitable Python); the run goes on."""


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return (int(out[0]), int(out[1]))


def find_python(minimum: tuple[int, int]) -> str:
    """A Python interpreter at least ``minimum``: ours, then PATH, then pyenv's."""
    if sys.version_info[:2] >= minimum:
        return sys.executable
    names = [f"python3.{m}" for m in range(20, minimum[1] - 1, -1)]
    candidates = [p for n in names if (p := shutil.which(n))]
    pyenv = os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")
    candidates += sorted(glob.glob(pyenv), reverse=True)
    for python in candidates:
        found = _version_of(python)
        if found is not None and found >= minimum:
            return python
    raise PeerUnavailable(f"needs Python ≥ {minimum[0]}.{minimum[1]}, none found")


def python_for(peer: Peer, log: Path) -> str:
    """The interpreter that runs ``peer``'s adapter, creating its venv on first use."""
    if not peer.packages:
        return sys.executable
    python = peer.venv / "bin" / "python"
    stamp = peer.venv / ".bench-installed"
    wanted = "\n".join(peer.packages)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    base = find_python(peer.min_python)
    print(f"  creating {peer.venv.relative_to(REPO)} ({' '.join(peer.packages)})", flush=True)
    with open(log, "a") as out:
        subprocess.run([base, "-m", "venv", "--clear", str(peer.venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True, stdout=out, stderr=out)
        subprocess.run([*pip, *peer.packages], check=True, stdout=out, stderr=out)
    stamp.write_text(wanted)
    return str(python)
