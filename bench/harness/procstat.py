"""Peak resident memory of a process and its children, sampled from /proc (Linux)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:  # the process exited while we looked
        return found
    for task in tasks:
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and all its descendants right now (0 once gone)."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            total += int(Path(f"/proc/{current}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
        stack += _children(current)
    return total


def high_water(pid: int) -> int:
    """The kernel's peak RSS (VmHWM) for ``pid`` alone, in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakSampler:
    """Samples a process tree's RSS every ``interval`` s in a thread until stopped."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self._stop.wait(self.interval)

    def stop(self) -> int:
        """Stop sampling; the peak in bytes, never below the main process's VmHWM.
        Idempotent."""
        if self._stop.is_set():
            return self.peak
        self.peak = max(self.peak, tree_rss(self.pid), high_water(self.pid))
        self._stop.set()
        self._thread.join()
        return self.peak
