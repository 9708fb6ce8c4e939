"""A worker whose handlers may hang: ``python -m tests.apps.hung_app``.

Queue ``hung`` has 2 permits and a 1 s deadline. ``hung`` handlers block their thread
for good; ``fast`` ones record that they ran (progress) and return. The snapshot is
published every 200 ms so ``awa health --worker`` sees changes at once. Prints "ready"
once the worker runs; SIGTERM shuts it down.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import awa
from tests.helpers import FAST_WORKER

client = awa.AsyncClient()


@client.task(None, kind="hung", queue="hung")
def hung(job: awa.Job[Any]) -> None:
    time.sleep(1e6)


@client.task(None, kind="fast", queue="hung")
def fast(job: awa.Job[Any]) -> None:
    return None


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    queue = awa.QueueConfig("hung", max_workers=2, deadline_ms=1_000)
    await client.start([queue], runtime_snapshot_interval_ms=200, **FAST_WORKER)
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=1_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
