"""Which database the CLI talks to: --database-url > AWA_DATABASE_URL > DATABASE_URL >
an embedded server with its data in ./.awa/pgdata (started if needed, said on stderr)."""

from __future__ import annotations

import argparse
import os
import sys

from awa import embedded
from awa.cli.args import postgres_url
from awa.config import resolve_database_url
from awa.errors import ValidationError
from awa.extras import require

EMBEDDED_DATA_DIR = ".awa/pgdata"


def database_url(explicit: str | None) -> str:
    """The URL to use, starting the embedded default when nothing else is configured."""
    url = resolve_database_url(explicit)
    if url is not None:
        if explicit is None:  # from the environment: checked here, and named by its variable
            variable = "AWA_DATABASE_URL" if os.environ.get("AWA_DATABASE_URL") else "DATABASE_URL"
            try:
                postgres_url(url)
            except argparse.ArgumentTypeError as exc:
                raise ValidationError(variable, str(exc)) from None
        return url
    require("embedded", "with no --database-url, AWA_DATABASE_URL or DATABASE_URL, awa")
    url = embedded.start(EMBEDDED_DATA_DIR)
    sys.stderr.write(f"awa: using the embedded PostgreSQL in ./{EMBEDDED_DATA_DIR}\n")
    return url
