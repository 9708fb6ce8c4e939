"""Where W2's pickup latency goes, per job: insert → notice → claim → handler start.

    .venv/bin/python bench/w2_breakdown.py [--seconds 15] [--rate 200]

A producer process inserts single jobs at a steady rate (as W2 does); this process runs
the worker on the embedded server (or ``DATABASE_URL``) and records, with
``time.monotonic()`` (system-wide, so the two processes' times compare), when each
``awa_available`` notice arrived, when each claim was sent and came back, and when each
handler started. It wraps two internals (``Listener._dispatch``, ``Dispatcher._claim``)
for the measurement only; nothing is changed for the library.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import sys
import tempfile
import time
from typing import Any

import psycopg

import awa
from awa.embedded import EmbeddedPostgres
from awa.worker import dispatcher, listener

NOTICES: list[float] = []
CLAIMS: list[tuple[float, float, list[int]]] = []  # sent, returned, seqs claimed

PRODUCER = r"""
import asyncio, json, sys, time, awa
async def main(url, rate, seconds):
    async with awa.AsyncClient(url, max_connections=4) as client:
        await client.insert({"seq": -1}, kind="noop")
        done, began = [], time.monotonic()
        for seq in range(int(rate * seconds)):
            delay = began + seq / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.monotonic()
            await client.insert({"seq": seq}, kind="noop")
            done.append((seq, sent, time.monotonic()))
        print(json.dumps(done))
asyncio.run(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))
"""


def _instrument() -> None:
    dispatch, claim = listener.Listener._dispatch, dispatcher.Dispatcher._claim

    def on_notice(self: Any, channel: str, payload: str) -> None:
        if channel == listener.AVAILABLE_CHANNEL:
            NOTICES.append(time.monotonic())
        dispatch(self, channel, payload)

    async def timed_claim(self: Any, reservation: Any) -> Any:
        sent = time.monotonic()
        result = await claim(self, reservation)
        CLAIMS.append((sent, time.monotonic(), [job.args["seq"] for job in result[0]]))
        return result

    listener.Listener._dispatch = on_notice  # type: ignore[method-assign]
    dispatcher.Dispatcher._claim = timed_claim  # type: ignore[method-assign]


async def _keep_warm(url: str, every_ms: float) -> None:
    """The experiment's knob: a trivial statement every ``every_ms`` on a connection of
    its own, to see how much of the claim's round trip is processes waking up."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            await conn.execute("SELECT 1")
            await asyncio.sleep(every_ms / 1000)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


async def _run(
    url: str, rate: float, seconds: float, warm_ms: float
) -> tuple[list[Any], dict[int, float]]:
    client = awa.AsyncClient(url, max_connections=12)
    await client.migrate()
    starts: dict[int, float] = {}

    @client.task(None, kind="noop", queue="default")
    async def noop(job: awa.Job[Any]) -> None:
        starts[job.args["seq"]] = time.monotonic()

    await client.start([("default", 32)])
    warm = asyncio.create_task(_keep_warm(url, warm_ms)) if warm_ms else None
    await asyncio.sleep(1.0)  # let the worker's loops settle, as W2 does
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PRODUCER, url, str(rate), str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    await asyncio.sleep(0.5)
    if warm is not None:
        warm.cancel()
    await client.shutdown()
    await client.close()
    return json.loads(out), starts


def _report(rows: list[Any], starts: dict[int, float]) -> None:
    claim_of = {seq: (sent, back) for sent, back, seqs in CLAIMS for seq in seqs}
    notices = sorted(NOTICES)
    parts: dict[str, list[float]] = {
        "insert round trip": [],
        "commit → notice": [],
        "notice → claim sent": [],
        "claim round trip": [],
        "claimed → handler": [],
        "commit → handler": [],
    }
    for seq, inserted_at, acked in rows:
        if seq not in starts or seq not in claim_of:
            continue
        sent, back = claim_of[seq]
        i = bisect.bisect_right(notices, sent) - 1
        parts["insert round trip"].append(acked - inserted_at)
        parts["commit → notice"].append(notices[i] - acked if i >= 0 else 0.0)
        parts["notice → claim sent"].append(sent - notices[i] if i >= 0 else 0.0)
        parts["claim round trip"].append(back - sent)
        parts["claimed → handler"].append(starts[seq] - back)
        parts["commit → handler"].append(starts[seq] - acked)
    for name, values in parts.items():
        ms = [v * 1e3 for v in values]
        print(f"{name:22s} p50 {_pct(ms, 50):6.3f}  p99 {_pct(ms, 99):6.3f}  max {max(ms):7.3f} ms")
    empty = sum(1 for *_, seqs in CLAIMS if not seqs)
    print(f"{len(rows)} jobs, {len(CLAIMS)} claims ({empty} empty), {len(NOTICES)} notices")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--warm-ms", type=float, default=0.0, help="SELECT 1 this often")
    args = parser.parse_args()
    _instrument()
    url, server = os.environ.get("DATABASE_URL"), None
    if not url:
        server = EmbeddedPostgres(os.path.join(tempfile.mkdtemp(), "pgdata"))
        url = server.start()
    try:
        rows, starts = asyncio.run(_run(url, args.rate, args.seconds, args.warm_ms))
        _report(rows, starts)
    finally:
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
