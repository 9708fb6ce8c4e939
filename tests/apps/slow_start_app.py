"""``tests.apps.supervised_app``'s client, in an application whose import takes a long
time in a supervised child (a large application loading its settings, say).

Each child touches ``$AWA_TEST_IMPORT_MARKER.<pid>`` when its import starts, so a test
knows the children are mid-import; the supervisor's own import (to check the target)
is not slowed.
"""

from __future__ import annotations

import os
import pathlib
import time

from awa.supervisor.link import LINK_ENV
from tests.apps.supervised_app import client

if os.environ.get(LINK_ENV) and (marker := os.environ.get("AWA_TEST_IMPORT_MARKER")):
    pathlib.Path(f"{marker}.{os.getpid()}").touch()
    time.sleep(120)  # the slow import itself (the test stops the fleet during it)

__all__ = ["client"]
