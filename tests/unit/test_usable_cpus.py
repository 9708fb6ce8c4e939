"""``awa worker --processes auto``: one process per core the worker may use, within its
cgroup's CPU quota (a container's CPU limit), read from fake cgroup trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from awa.supervisor.cpus import cgroup_cpu_quota, usable_cpus

AFFINITY = len(os.sched_getaffinity(0))


def _tree(tmp_path: Path, files: dict[str, str], proc: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "proc_cgroup").write_text(proc)
    return root, tmp_path / "proc_cgroup"


@pytest.mark.parametrize(
    ("files", "proc", "quota"),
    [
        ({"cpu.max": "max 100000\n"}, "0::/\n", None),  # v2, no limit
        ({"cpu.max": "150000 100000\n"}, "0::/\n", 1.5),  # v2 at the namespace's root
        ({"kubepods/pod1/cpu.max": "200000 100000\n"}, "0::/kubepods/pod1\n", 2.0),  # own v2
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
         "2:cpu,cpuacct:/\n", None),  # v1, no limit
        ({"cpu/docker/abc/cpu.cfs_quota_us": "50000\n",
          "cpu/docker/abc/cpu.cfs_period_us": "100000\n"},
         "4:memory:/x\n2:cpu,cpuacct:/docker/abc\n", 0.5),  # own v1
        ({}, "", None),  # nothing readable
    ],
)  # fmt: skip
def test_the_quota_of_the_process_own_cgroup(
    tmp_path: Path, files: dict[str, str], proc: str, quota: float | None
) -> None:
    root, proc_cgroup = _tree(tmp_path, files, proc)
    assert cgroup_cpu_quota(root, proc_cgroup) == quota


def test_a_quota_cuts_the_affinity_rounded_up_and_never_to_zero(tmp_path: Path) -> None:
    root, proc_cgroup = _tree(tmp_path, {"cpu.max": "50000 100000\n"}, "0::/\n")
    assert usable_cpus(root, proc_cgroup) == 1
    root, proc_cgroup = _tree(tmp_path / "big", {"cpu.max": "6400000 100000\n"}, "0::/\n")
    assert usable_cpus(root, proc_cgroup) == AFFINITY  # a quota above the cores changes nothing
    root, proc_cgroup = _tree(tmp_path / "none", {}, "")
    assert usable_cpus(root, proc_cgroup) == AFFINITY
