"""Weighted concurrency, measured (design record 011, docs/adr/0005).

Four queues with different weights, minimums and job durations run on one real awa
worker (embedded PostgreSQL unless DATABASE_URL is set). Three phases:

1. **fairness** — three queues saturated, then a fourth joins with a long backlog:
   in-flight per queue sampled every 20 ms through ``client.health_check()``, achieved
   vs ideal (min + weighted share of the overflow pool) over the steady windows;
2. **convergence** — the fourth queue joins again and again with short bursts; time
   from its insert until it first runs its share, with the "beyond" wake-up (a permit
   freed in the pool wakes other queues with demand) and without it (the record's
   behaviour: only the releasing queue is woken) — switched by a private flag;
3. **throughput** — the same fixed work in weighted mode and in hard-reserved mode with
   the same 40 slots split statically.

    python bench/fairness.py [--plot docs/fairness.png] [--json out.json]

The plot is drawn by bench/fairness_plot.py in a bench-only venv with matplotlib
(``python -m venv bench/.venvs/plot && bench/.venvs/plot/bin/pip install matplotlib``);
awa itself never depends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

import awa
from awa.embedded import EmbeddedPostgres

GLOBAL = 40
SAMPLE_S = 0.020
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Q:
    name: str
    min_workers: int
    weight: int
    ms: int  # handler duration
    hard: int  # max_workers in the hard-reserved comparison (Σ = GLOBAL)


QUEUES = (
    Q("critical", 4, 4, 50, 18),
    Q("default", 2, 2, 100, 9),
    Q("bulk", 2, 1, 200, 6),
    Q("late", 0, 2, 80, 7),  # joins while the others are saturated
)
BY_NAME = {q.name: q for q in QUEUES}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ideal(active: list[str]) -> dict[str, float]:
    """min + weighted share of the overflow pool, for the queues with demand."""
    overflow = GLOBAL - sum(q.min_workers for q in QUEUES)
    total_weight = sum(BY_NAME[n].weight for n in active)
    return {n: BY_NAME[n].min_workers + overflow * BY_NAME[n].weight / total_weight for n in active}


# -- a worker whose handlers report what runs -------------------------------------------


class Probe:
    """Counts running handlers per queue (exact) and samples health (as operators see it)."""

    def __init__(self, client: awa.AsyncClient) -> None:
        self.client = client
        self.t0 = time.perf_counter()
        self.running = {q.name: 0 for q in QUEUES}
        self.finished = {q.name: 0 for q in QUEUES}
        self.samples: list[tuple[float, dict[str, int]]] = []  # health: in flight
        self.held: list[tuple[float, dict[str, int]]] = []  # permits, incl. mid-claim
        self._watch: tuple[str, int, asyncio.Future[float]] | None = None
        self._done: dict[str, tuple[int, asyncio.Event]] = {}
        for q in QUEUES:
            client.task(None, kind=q.name, queue=q.name)(self._handler(q))

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def _handler(self, q: Q) -> Any:
        async def handle(job: awa.Job[Any]) -> None:
            self.running[q.name] += 1
            watch = self._watch
            reached = watch and watch[0] == q.name and self.running[q.name] >= watch[1]
            if watch and reached and not watch[2].done():
                watch[2].set_result(self.now())
            try:
                await asyncio.sleep(q.ms / 1000)
            finally:
                self.running[q.name] -= 1
                self.finished[q.name] += 1
                target = self._done.get(q.name)
                if target and self.finished[q.name] >= target[0]:
                    target[1].set()

        return handle

    def reach(self, queue: str, n: int) -> asyncio.Future[float]:
        """Resolves with the time ``queue`` first runs ``n`` handlers at once."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._watch = (queue, n, future)
        return future

    def finished_event(self, queue: str, n: int) -> asyncio.Event:
        event = asyncio.Event()
        self._done[queue] = (n, event)
        return event

    async def sample(self) -> None:
        dispatchers = self.client._worker.dispatchers  # private: permits held mid-claim
        while True:
            health = await self.client.health_check()
            now = self.now()
            self.samples.append((now, {n: h.in_flight for n, h in health.queues.items()}))
            self.held.append((now, {n: d.permits.held for n, d in dispatchers.items()}))
            await asyncio.sleep(SAMPLE_S)


async def fresh_database(admin_url: str, name: str) -> str:
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    params = conninfo.conninfo_to_dict(admin_url)
    params["dbname"] = name
    url = conninfo.make_conninfo(**params)  # type: ignore[arg-type]
    async with awa.AsyncClient(url) as client:
        await client.migrate()
    return url


def weighted_queues() -> list[awa.QueueConfig]:
    return [awa.QueueConfig(q.name, min_workers=q.min_workers, weight=q.weight) for q in QUEUES]


def overflow_pool(client: awa.AsyncClient) -> Any:
    return client._worker.dispatchers["critical"].permits._pool  # private: bench switch


async def insert(client: awa.AsyncClient, queue: str, n: int) -> None:
    await client.insert_many([{"i": i} for i in range(n)], kind=queue, queue=queue)


# -- phases 1 and 2: fairness and convergence ---------------------------------------------


async def run_weighted(url: str, wake_others: bool, joins: int) -> dict[str, Any]:
    """Three saturated queues, one long join of ``late``, then ``joins`` short ones."""
    async with awa.AsyncClient(url, max_connections=12) as client:
        probe = Probe(client)
        for name, n in (("critical", 9_000), ("default", 2_500), ("bulk", 700)):
            await insert(client, name, n)
        await client.start(weighted_queues(), global_max_workers=GLOBAL)
        overflow_pool(client)._wake_others = wake_others
        probe.t0 = time.perf_counter()
        sampler = asyncio.create_task(probe.sample())
        target = math.floor(ideal([q.name for q in QUEUES])["late"])
        events: list[dict[str, float]] = []
        try:
            await asyncio.sleep(2.0)  # three queues
            for burst in [260] + [100] * joins:
                await asyncio.sleep(0.5)  # let the incumbents re-absorb the pool
                reached = probe.reach("late", target)
                done = probe.finished_event("late", probe.finished["late"] + burst)
                joined = probe.now()
                await insert(client, "late", burst)
                inserted = probe.now()
                finished = asyncio.ensure_future(done.wait())
                async with asyncio.timeout(60):
                    await asyncio.wait({reached, finished}, return_when=asyncio.FIRST_COMPLETED)
                    await finished
                # None: the burst was over before 'late' ever ran its share at once.
                converged = reached.result() if reached.done() else None
                reached.cancel()
                took = "never" if converged is None else f"{1000 * (converged - inserted):.0f} ms"
                log(f"wake {'on' if wake_others else 'off'}: join of {burst}: share after {took}")
                events.append(
                    {
                        "joined": joined,
                        "inserted": inserted,
                        "converged": converged,
                        "left": probe.now(),
                        "burst": burst,
                    }
                )
        finally:
            sampler.cancel()
            await client.shutdown(timeout_ms=2_000)
    return {"samples": probe.samples, "held": probe.held, "events": events, "target": target}


def _mean(samples: list[Any], start: float, end: float, key: Any) -> float:
    values = [key(s) for t, s in samples if start <= t < end]
    return statistics.fmean(values) if values else float("nan")


def fairness_report(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Achieved vs ideal over the two steady windows of one run: in flight (health) and
    permits held (in flight plus those reserved by a claim under way)."""
    first = run["events"][0]
    windows = [
        ("3 queues", ["critical", "default", "bulk"], 0.5, first["joined"]),
        ("4 queues", [q.name for q in QUEUES], first["inserted"] + 0.5, first["left"] - 0.3),
    ]
    rows = []
    for label, active, start, end in windows:
        target = ideal(active)
        for name in [*active, "(total)"]:

            def pick(s: dict[str, int], name: str = name) -> int:
                return sum(s.values()) if name == "(total)" else s[name]

            rows.append(
                {
                    "window": label,
                    "queue": name,
                    "start": start,
                    "end": end,
                    "ideal": target.get(name, GLOBAL),
                    "in_flight": _mean(run["samples"], start, end, pick),
                    "held": _mean(run["held"], start, end, pick),
                }
            )
    return rows


def convergence_report(run: dict[str, Any]) -> dict[str, Any]:
    """Per join of 'late': ms from its committed insert until it first runs its share
    (None: never during the burst), its mean in flight meanwhile, and how many permits
    nobody held in the first 300 ms."""
    share = ideal([q.name for q in QUEUES])["late"]
    joins = run["events"][1:]  # the first join is the long one of the fairness window
    times = [
        None if e["converged"] is None else 1000 * (e["converged"] - e["inserted"]) for e in joins
    ]
    reached = sorted(t for t in times if t is not None)
    late = [
        _mean(run["samples"], e["inserted"], e["left"] - 0.1, lambda s: s["late"]) for e in joins
    ]
    idle = [
        _mean(run["held"], e["inserted"], e["inserted"] + 0.3, lambda s: GLOBAL - sum(s.values()))
        for e in joins
    ]
    return {
        "ms": times,
        "median_ms": statistics.median(reached) if len(reached) == len(times) else None,
        "max_ms": max(reached) if len(reached) == len(times) else None,
        "never": len(times) - len(reached),
        "late_mean_in_flight": statistics.fmean(late),
        "late_ideal": share,
        "unheld_permits_first_300ms": statistics.fmean(idle),
    }


# -- phase 3: throughput ----------------------------------------------------------------

WORK = {"critical": 1_200, "default": 500, "bulk": 300, "late": 400}


async def run_fixed_work(url: str, weighted: bool) -> dict[str, Any]:
    async with awa.AsyncClient(url, max_connections=12) as client:
        probe = Probe(client)
        for name, n in WORK.items():
            await insert(client, name, n)
        events = {name: probe.finished_event(name, n) for name, n in WORK.items()}
        finish: dict[str, float] = {}

        async def track(name: str) -> None:
            await events[name].wait()
            finish[name] = probe.now()

        if weighted:
            await client.start(weighted_queues(), global_max_workers=GLOBAL)
        else:
            await client.start([(q.name, q.hard) for q in QUEUES])
        probe.t0 = time.perf_counter()
        sampler = asyncio.create_task(probe.sample())
        try:
            async with asyncio.timeout(120):
                await asyncio.gather(*(track(name) for name in WORK))
            mode = "weighted" if weighted else "hard-reserved"
            log(f"{mode}: done in {max(finish.values()):.2f} s")
        finally:
            sampler.cancel()
            await client.shutdown(timeout_ms=2_000)
    makespan = max(finish.values())
    jobs = sum(WORK.values())
    busy = statistics.fmean(sum(s.values()) for t, s in probe.samples if t < makespan)
    return {
        "makespan_s": makespan,
        "jobs_per_s": jobs / makespan,
        "finish": finish,
        "mean_in_flight": busy,
        "samples": probe.samples,
    }


# -- output -----------------------------------------------------------------------------


def print_report(results: dict[str, Any]) -> None:
    print(f"\nglobal_max_workers={GLOBAL}; queues (min, weight, handler ms):")
    for q in QUEUES:
        print(f"  {q.name:<9} min {q.min_workers}  weight {q.weight}  {q.ms:>4} ms")
    print("\n1. achieved vs ideal per queue (means of 20 ms samples), wake on")
    head = ("window", "queue", "ideal", "in flight", "err", "held", "err")
    print("  {:<9} {:<9} {:>6} {:>10} {:>7} {:>6} {:>7}".format(*head))
    for row in results["fairness"]:
        target = row["ideal"]
        errs = [100 * (row[k] - target) / target for k in ("in_flight", "held")]
        print(
            f"  {row['window']:<9} {row['queue']:<9} {target:>6.1f} {row['in_flight']:>10.1f} "
            f"{errs[0]:>+6.1f}% {row['held']:>6.1f} {errs[1]:>+6.1f}%"
        )
    print(f"\n2. convergence: insert → 'late' runs its share ({results['target']} at once)")
    for label in ("wake_on", "wake_off"):
        c = results["convergence"][label]
        ms = ", ".join("never" if x is None else f"{x:.0f}" for x in c["ms"])
        median = "—" if c["median_ms"] is None else f"{c['median_ms']:.0f} ms"
        print(
            f"  {label:<8} median {median:>7}  never {c['never']}  late in flight "
            f"{c['late_mean_in_flight']:.1f}/{c['late_ideal']:.1f}  unheld permits (first "
            f"300 ms) {c['unheld_permits_first_300ms']:.1f}  [{ms}]"
        )
    print("\n3. the same fixed work, " + ", ".join(f"{n} {k}" for k, n in WORK.items()))
    for label in ("weighted", "hard_reserved"):
        r = results["throughput"][label]
        done = "  ".join(f"{k} {v:.2f}s" for k, v in sorted(r["finish"].items()))
        print(
            f"  {label:<13} {r['jobs_per_s']:>6.0f} jobs/s  makespan {r['makespan_s']:.2f} s  "
            f"mean in flight {r['mean_in_flight']:.1f}/{GLOBAL}  (done: {done})"
        )
    gain = results["throughput"]["weighted"]["jobs_per_s"]
    gain /= results["throughput"]["hard_reserved"]["jobs_per_s"]
    print(f"  weighted / hard-reserved throughput: ×{gain:.2f}")


def plot(results: dict[str, Any], out: Path) -> None:
    python = HERE / ".venvs" / "plot" / "bin" / "python"
    if not python.exists():
        print(f"\nno plot: {python} missing (see this file's docstring)", file=sys.stderr)
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(results, f)
    try:
        subprocess.run([str(python), str(HERE / "fairness_plot.py"), f.name, str(out)], check=True)
    finally:
        os.unlink(f.name)
    print(f"\nplot: {out}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", type=Path, default=HERE.parent / "docs" / "fairness.png")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--joins", type=int, default=6)
    args = parser.parse_args()
    admin = os.environ.get("DATABASE_URL")
    server = None
    if not admin:
        server = EmbeddedPostgres(os.path.join(tempfile.mkdtemp(prefix="awa-bench-"), "pg"))
        admin = server.start()
    names = (f"awa_fairness_{os.getpid()}_{i}" for i in itertools.count())
    try:
        on = await run_weighted(await fresh_database(admin, next(names)), True, args.joins)
        off = await run_weighted(await fresh_database(admin, next(names)), False, args.joins)
        weighted = await run_fixed_work(await fresh_database(admin, next(names)), True)
        hard = await run_fixed_work(await fresh_database(admin, next(names)), False)
    finally:
        if server is not None:
            server.destroy()
    results = {
        "global": GLOBAL,
        "queues": [q.__dict__ for q in QUEUES],
        "target": on["target"],
        "fairness": fairness_report(on),
        "convergence": {"wake_on": convergence_report(on), "wake_off": convergence_report(off)},
        "throughput": {"weighted": weighted, "hard_reserved": hard},
        "runs": {"wake_on": on, "wake_off": off},
    }
    print_report(results)
    if args.json:
        args.json.write_text(json.dumps(results))
    plot(results, args.plot)


if __name__ == "__main__":
    asyncio.run(main())
