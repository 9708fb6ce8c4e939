"""awa.worker.memory: glibc's mmap threshold is fixed so big blocks go back when freed."""

from __future__ import annotations

import platform

import pytest

from awa.worker import memory


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_the_threshold_is_fixed_on_glibc_unless_the_operator_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "_applied", False)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
    assert memory.return_big_blocks_when_freed() is False  # the operator chose
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    assert memory.return_big_blocks_when_freed() is True
    assert memory.return_big_blocks_when_freed() is True  # once per process
