"""Which database the CLI talks to: --database-url > AWA_DATABASE_URL > DATABASE_URL >
an embedded server with its data in ./.awa/pgdata (started if needed, said on stderr)."""

from __future__ import annotations

import sys

from awa import embedded
from awa.config import resolve_database_url
from awa.extras import require

EMBEDDED_DATA_DIR = ".awa/pgdata"


def database_url(explicit: str | None) -> str:
    """The URL to use, starting the embedded default when nothing else is configured."""
    url = resolve_database_url(explicit)
    if url is not None:
        return url
    require("embedded", "with no --database-url, AWA_DATABASE_URL or DATABASE_URL, awa")
    url = embedded.start(EMBEDDED_DATA_DIR)
    sys.stderr.write(f"awa: using the embedded PostgreSQL in ./{EMBEDDED_DATA_DIR}\n")
    return url
