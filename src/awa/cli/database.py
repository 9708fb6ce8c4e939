"""Which database the CLI talks to: --database-url > AWA_DATABASE_URL > DATABASE_URL >
an embedded server with its data in ./.awa/pgdata (started if needed, said on stderr)."""

from __future__ import annotations

import argparse
import sys

from awa import embedded
from awa.cli.args import postgres_url
from awa.config import database_url_source, resolve_database_url
from awa.errors import ValidationError
from awa.extras import require

EMBEDDED_DATA_DIR = ".awa/pgdata"


def configured_url(explicit: str | None) -> str | None:
    """The flag's URL (already checked), else the environment's (checked here, and named
    by its variable when malformed), else None."""
    url = resolve_database_url(explicit)
    if url is not None and explicit is None:
        try:
            postgres_url(url)
        except argparse.ArgumentTypeError as exc:
            raise ValidationError(database_url_source(None), str(exc)) from None
    return url


def database_url(explicit: str | None) -> str:
    """The URL to use, starting the embedded default when nothing else is configured."""
    url = configured_url(explicit)
    if url is not None:
        return url
    require("embedded", "with no --database-url, AWA_DATABASE_URL or DATABASE_URL, awa")
    url = embedded.start(EMBEDDED_DATA_DIR)
    sys.stderr.write(f"awa: using the embedded PostgreSQL in ./{EMBEDDED_DATA_DIR}\n")
    return url
