"""``awa worker --processes N``: a supervisor keeping N worker processes running.

:mod:`awa.supervisor.process` is the parent's side (start, restart with backoff, forward
signals); :mod:`awa.supervisor.link` is the socket each child reports on and watches.
"""

from awa.supervisor.link import LINK_ENV, ChildLink
from awa.supervisor.process import Child, Supervisor, describe_exit, restart_delay

__all__ = ["LINK_ENV", "Child", "ChildLink", "Supervisor", "describe_exit", "restart_delay"]
