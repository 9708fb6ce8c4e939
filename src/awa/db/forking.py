"""What a forked child does with the connections it inherits: nothing, ever.

A child made by ``os.fork()`` (gunicorn's ``--preload``, multiprocessing's fork start)
shares its parent's sockets. A statement sent on one from the child would interleave with
the parent's on the same server session, and closing one — even by garbage collection,
when libpq says goodbye — would end the parent's session. So every connection awa opens
is tracked, and in a child its socket is pointed at ``/dev/null`` before anything can
use it: the goodbye goes nowhere, and the parent keeps its sessions. Clients then forget
their pools (:func:`after_fork_in_child`) and open their own on first use.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection

_opened: weakref.WeakSet[AsyncConnection[Any]] = weakref.WeakSet()
_resets: weakref.WeakSet[Any] = weakref.WeakSet()  # objects with a _forget_parent() method


def track(conn: AsyncConnection[Any]) -> AsyncConnection[Any]:
    """Remember ``conn`` as this process's; returns it."""
    _opened.add(conn)
    return conn


def reset_in_child(owner: Any) -> None:
    """Call ``owner._forget_parent()`` in every child forked from now on (weakly held)."""
    _resets.add(owner)


def _disown() -> None:
    inherited = list(_opened)
    _opened.clear()
    if inherited:
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in inherited:
                _blind(conn, devnull)
        finally:
            os.close(devnull)
    for owner in list(_resets):
        forget: Callable[[], None] = owner._forget_parent
        forget()


def _blind(conn: AsyncConnection[Any], devnull: int) -> None:
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed already: no socket
        return
    if fd >= 0:
        os.dup2(devnull, fd)


os.register_at_fork(after_in_child=_disown)
