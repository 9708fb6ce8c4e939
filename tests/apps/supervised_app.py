"""The client ``awa worker tests.apps.supervised_app:client --processes N …`` runs in the
supervisor and PgBouncer tests.

The database comes from AWA_DATABASE_URL. The worker runs with the fast maintenance
settings of the tests (a killed process's jobs are rescued within seconds). Kind
``fleet_sleep`` sleeps ``args["ms"]`` and records its execution, with its pid, in
``chaos_exec`` (``tests.chaos.support``), so tests judge from what actually ran.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Any

import awa
from tests.chaos.support import Recorder
from tests.helpers import FAST_WORKER


class FastClient(awa.AsyncClient):
    """An AsyncClient whose worker starts with the tests' fast maintenance settings."""

    async def start(
        self,
        /,
        queues: Iterable[Any] | None = None,
        *,
        global_max_workers: int | None = None,
        **settings: Any,
    ) -> None:
        await super().start(
            queues, global_max_workers=global_max_workers, **{**FAST_WORKER, **settings}
        )


client = FastClient()
recorder = Recorder(os.environ.get("AWA_TEST_RECORD_URL") or client.database_url)


@client.task(None, kind="fleet_sleep", queue="fleet")
async def fleet_sleep(job: awa.Job[Any]) -> None:
    await asyncio.sleep(job.args.get("ms", 10) / 1000)
    recorder.record(job, os.getpid())
