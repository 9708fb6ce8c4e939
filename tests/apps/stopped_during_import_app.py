"""``tests.acceptance.cli_app``'s client, in an application whose import waits: it touches
``$AWA_TEST_IMPORT_MARKER`` when its import starts, then waits for the file
``$AWA_TEST_IMPORT_GO`` (at most a minute), so a test can signal the process mid-import.
"""

from __future__ import annotations

import os
import pathlib
import time

from tests.acceptance.cli_app import client

marker, go = os.environ["AWA_TEST_IMPORT_MARKER"], os.environ["AWA_TEST_IMPORT_GO"]
pathlib.Path(marker).touch()
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.01)  # the application's slow import itself

__all__ = ["client"]
