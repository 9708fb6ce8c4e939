"""A client built with a database URL of its own: ``awa --database-url … worker`` must
refuse it rather than quietly run against another database than the one asked for."""

from __future__ import annotations

from typing import Any

import awa

client = awa.AsyncClient("postgresql://127.0.0.1:1/another_app")


@client.task(None, kind="own_url_noop", queue="own_url")
async def noop(job: awa.Job[Any]) -> None:
    return None
