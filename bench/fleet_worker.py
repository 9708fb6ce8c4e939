"""A worker process for bench/fleet_fairness.py: ``python bench/fleet_worker.py URL SPEC``.

SPEC is JSON: ``{"queues": {"a": [min, weight], ...}, "global_max_workers": N | null,
"per_queue": N}``. With ``global_max_workers`` the process runs design record 011's
weighted mode; else each queue gets ``per_queue`` hard-reserved permits (the fleet pool,
when set, then shares them). Handles the ``work`` kind (async sleep of ``args["ms"]``).
Prints "ready", runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import awa


async def main(url: str, spec: dict[str, Any]) -> None:
    client = awa.AsyncClient(url, max_connections=6)
    for queue in spec["queues"]:

        @client.task(None, kind=f"work_{queue}", queue=queue)
        async def work(job: awa.Job[Any]) -> None:
            await asyncio.sleep(job.args["ms"] / 1000)

    if spec.get("global_max_workers"):
        queues: list[Any] = [
            awa.QueueConfig(q, min_workers=m, weight=w) for q, (m, w) in spec["queues"].items()
        ]
    else:
        queues = [(q, spec["per_queue"]) for q in spec["queues"]]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start(
        queues,
        global_max_workers=spec.get("global_max_workers"),
        promote_interval_ms=100,
        poll_interval_ms=100,
    )
    print("ready", flush=True)
    await stop.wait()
    await client.shutdown(timeout_ms=5_000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
