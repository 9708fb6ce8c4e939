"""A py-spy profile of the awa worker process during W1, summarised as markdown."""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from pathlib import Path

from harness.adapter import Adapter
from harness.peers import PEERS, TOOLS, python_for
from harness.server import Server
from harness.workloads import Settings, wait_completed

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def _short(frame: str) -> str:
    """``func (path/to/awa/worker/x.py:12)`` → ``awa/worker/x.py:func``."""
    match = FRAME.match(frame)
    if not frame.strip():
        return "(frame without a name: native code)"
    if not match:
        return frame
    path = match["file"]
    for marker in ("/site-packages/", "/src/", "/lib/python3.11/", "/lib/python3.12/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match['func']}"


def summarise(raw: Path, top: int = 15) -> str:
    """Self time per function and inclusive time per awa function, from collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            if frame.startswith("awa/"):
                inclusive[frame] += n
    if not total:
        return "py-spy recorded no samples."

    def rows(counter: Counter[str]) -> list[str]:
        return [f"| `{name}` | {100 * n / total:.1f} % |" for name, n in counter.most_common(top)]

    return "\n".join(
        [
            f"py-spy, {total} samples of the worker's threads (idle time excluded) while it "
            "drained W1. Self time: where the CPU actually was.",
            "",
            "| function (self) | share |",
            "|---|--:|",
            *rows(own),
            "",
            "Inclusive time of awa's own functions (with everything they call):",
            "",
            "| awa function (inclusive) | share |",
            "|---|--:|",
            *rows(inclusive),
        ]
    )


def profile_awa(server: Server, settings: Settings, out: Path, logs: Path) -> None:
    """Run W1 for awa once with py-spy attached to the worker; write the summary."""
    awa = next(p for p in PEERS if p.name == "awa")
    adapter = Adapter(awa, python_for(awa, logs / "venvs.log"), logs)
    info = adapter.call("describe")
    spy = Path(python_for(TOOLS, logs / "venvs.log")).parent / "py-spy"
    url = server.fresh_database("bench_profile")
    adapter.call("setup", "--url", url)
    adapter.call("enqueue", "--url", url, "--jobs", str(settings.jobs))
    worker = adapter.spawn("worker", "--url", url)
    worker.expect(timeout=120)
    raw = logs / "profile-awa-w1.collapsed"
    recorder = subprocess.Popen(
        [
            str(spy),
            "record",
            "--pid",
            str(worker.pid),
            "--rate",
            "250",
            "--format",
            "raw",
            "--output",
            str(raw),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # py-spy attaches
    began = time.perf_counter()
    worker.send("go")
    seen = wait_completed(url, info["completed_sql"], settings.jobs, 600, worker)
    elapsed = (seen or time.perf_counter()) - began
    worker.finish()
    recorder.wait(timeout=60)
    server.drop_database("bench_profile")
    rate = settings.jobs / elapsed
    text = (
        f"W1 with {settings.jobs} jobs drained in {elapsed:.1f} s ({rate:,.0f} jobs/s, "
        f"slowed by sampling).\n\n{summarise(raw)}\n"
    )
    (out / "profile-awa-w1.md").write_text(text)
    print(text)
