"""A real PgBouncer in transaction pooling mode in front of the test server.

PgBouncer comes from Debian (``pgbouncer``); ``make test`` installs it where it can
(``.ci/system-deps``). Without it every test here is skipped with that reason. One
PgBouncer serves the session: it maps every database name to the server under test, so
each test reaches its own fresh database through it. It keeps fewer server connections
per database than a worker's pool, so statements of one client connection hop sessions.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import PgServer
from tests.pgbouncer.bouncer import BouncerError, PgBouncer

POOL_SIZE = 4


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(pg_server.admin_url, pool_size=POOL_SIZE)
    try:
        bouncer.start()
    except BouncerError as exc:
        pytest.skip(f"{exc} (`make test` installs it where it can)")
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def bouncer_url(pgbouncer: PgBouncer, database_url: str) -> str:
    """This test's fresh database, reached through PgBouncer (transaction mode)."""
    return pgbouncer.url_for(database_url)
