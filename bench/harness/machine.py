"""What the numbers were measured on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def describe() -> dict[str, str]:
    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0]
    ram = f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb.isdigit() else "unknown"
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return {
        "nproc": str(os.cpu_count()),
        "ram": ram,
        "cpu": _first("/proc/cpuinfo", "model name"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": load,
    }
