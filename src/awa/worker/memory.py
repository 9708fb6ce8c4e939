"""Giving the memory of big jobs back to the system once they are done (issue 18.6).

glibc's ``malloc`` serves blocks of 128 KiB and more with ``mmap``, so freeing one returns
it to the system at once — until the first such block is freed: glibc then raises its
mmap threshold to that block's size (up to 32 MiB), to save system calls, and the next
big blocks come from the heap, where freed memory stays with the process (what is still
allocated around it keeps the heap from shrinking). After a worker drained 512 jobs of
1 MiB args it held 554 MiB this way, with next to nothing still referenced
(``malloc_trim`` gave it back). Setting the threshold explicitly turns the adjustment
off: big blocks (decoded args, the driver's results) stay mmapped and go back when freed.

The setting is process-wide. A process that chose its own (``MALLOC_MMAP_THRESHOLD_`` in
the environment) keeps it; elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

logger = logging.getLogger("awa")

M_MMAP_THRESHOLD = -3  # mallopt parameter number, from glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own default, kept fixed
_applied = False


def return_big_blocks_when_freed() -> bool:
    """Fix glibc's mmap threshold at 128 KiB (once per process); True when it is set."""
    global _applied
    if _applied:
        return True
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False  # the operator chose
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt), or no libc
        return False
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1)
    if _applied:
        logger.debug("malloc: mmap threshold fixed at %d bytes", MMAP_THRESHOLD_BYTES)
    return _applied
