"""How many cores this process may use: what ``awa worker --processes auto`` starts.

A container's CPU limit is a cgroup quota, not an affinity mask: ``sched_getaffinity``
still reports every core of the host, and one worker per host core would oversubscribe a
container limited to two (Python 3.13's ``os.process_cpu_count`` does not read quotas
either). So the affinity is cut to the quota of the process's own cgroup, rounded up:
cgroup v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The cores this process may run on, within its cgroup's CPU quota; at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(count, 1)


def cgroup_cpu_quota(cgroup_root: Path, proc_cgroup: Path) -> float | None:
    """CPUs' worth of time the process's cgroup may use per period; None: no quota."""
    v2, v1 = _own_cgroups(proc_cgroup)
    for directory in (cgroup_root / v2.lstrip("/"), cgroup_root):
        quota = _v2_quota(directory / "cpu.max")
        if quota is not None:
            return quota
    for directory in (cgroup_root / "cpu" / v1.lstrip("/"), cgroup_root / "cpu"):
        quota = _v1_quota(directory)
        if quota is not None:
            return quota
    return None


def _own_cgroups(proc_cgroup: Path) -> tuple[str, str]:
    """The process's cgroup v2 path and its v1 ``cpu`` controller path ("/" if unknown)."""
    v2 = v1 = "/"
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path or "/"
        elif "cpu" in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def _v2_quota(cpu_max: Path) -> float | None:
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return _ratio(quota, period)


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = (directory / "cpu.cfs_quota_us").read_text().strip()
        period = (directory / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None  # v1 writes -1 for "no quota"
