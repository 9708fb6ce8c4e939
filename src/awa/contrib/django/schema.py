"""awa's schema through Django's ``migrate``.

awa's own migrator runs (same numbered files, same advisory lock as ``awa migrate``) on a
connection of its own to the database of the Django alias being migrated. Its
transaction is separate from the Django migration's; applying awa's schema is
idempotent, so a Django migration that fails later leaves nothing half done.
"""

from __future__ import annotations

import asyncio
from typing import Any

from awa.client.async_client import AsyncClient
from awa.contrib.django import conf


def migrate(alias: str) -> list[int]:
    """Apply pending awa migrations when ``alias`` is the database awa uses
    (``AWA['DATABASE']``); other databases of a multi-database project are left alone."""
    settings = conf.current()
    if alias != settings.database:
        return []
    url = settings.database_url or conf.database_url(alias)

    async def run() -> list[int]:
        async with AsyncClient(url, max_connections=1) as client:
            return await client.migrate()

    return asyncio.run(run())


def apply(apps: Any, schema_editor: Any) -> None:
    """``RunPython`` forwards step of the app's migrations."""
    migrate(schema_editor.connection.alias)
