"""SIGTERM before the worker's own handlers exist.

A process with no handler for SIGTERM dies of it — except PID 1 of a container, for
which the kernel drops a signal it has no handler for. A stop sent while the application's
module was still importing (Django's set-up, say) was lost there, and the worker then
started and claimed jobs until it was killed. ``hold`` handles SIGTERM from the start of
``awa worker`` until the event loop's handlers replace it: nothing has started yet, so
it says so and exits 0 at once, wherever the import is.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write(f"awa: {signal.Signals(signum).name} before the worker started: exiting\n")
    sys.stderr.flush()
    # At once, not by raising SystemExit: raised inside the application's import it may
    # be wrapped (a class body's __set_name__ turns it into a RuntimeError: exit 1 with a
    # traceback). Nothing has started that needs stopping.
    os._exit(0)


def hold() -> None:
    """Exit 0 on SIGTERM until the worker's own handler replaces this one."""
    signal.signal(signal.SIGTERM, _exit)
