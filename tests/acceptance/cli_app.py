"""The client ``awa worker tests.acceptance.cli_app:client`` runs in the CLI tests.

The database comes from AWA_DATABASE_URL. Kind ``cli_echo`` completes at once; kind
``cli_fail`` fails for good; kind ``cli_close`` completes and has the application close
its client (as an application may, on some condition of its own).
"""

from __future__ import annotations

import asyncio
from typing import Any

import awa

client = awa.AsyncClient()


@client.task(None, kind="cli_echo", queue="cli")
async def cli_echo(job: awa.Job[Any]) -> None:
    return None


@client.task(None, kind="cli_fail", queue="cli")
async def cli_fail(job: awa.Job[Any]) -> None:
    raise awa.TerminalError("this job always fails")


_closing: list[asyncio.Task[None]] = []  # a reference, so the task is not collected


@client.task(None, kind="cli_close", queue="cli")
async def cli_close(job: awa.Job[Any]) -> None:
    _closing.append(asyncio.get_running_loop().create_task(client.close()))
