"""Side-by-side benchmark of awa and its peers (see shared/spec/BENCHMARKS.md).

    python bench/run.py                 # full: 3 interleaved repetitions → bench/results/
    python bench/run.py --quick         # smoke: small sizes, 1 repetition → bench/results/tmp/
    python bench/run.py --systems awa,pgqueuer --workloads W1,W2 --reps 2
    python bench/run.py --profile       # py-spy profile of the awa worker during W1
    python bench/run.py --pg-bin /usr/lib/postgresql/15/bin   # or DATABASE_URL=… (a server)

Run it with awa's interpreter (`make bench` does); peers get their own virtualenvs.
"""

from __future__ import annotations

import argparse
import compileall
import json
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine
from harness.adapter import Adapter, AdapterError
from harness.docs import write_docs, write_results_md
from harness.peers import BENCH, PEERS, REPO, TOOLS, Peer, PeerUnavailable, python_for
from harness.profile import profile_awa
from harness.server import start_server
from harness.workloads import Runner, Settings, WorkloadFailed

WORKLOADS = ["W1", "W1xP", "W5", "W2", "W3", "W4", "W6", "idle", "ceiling"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 repetition")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, quick 1)")
    parser.add_argument(
        "--systems", help="comma-separated subset of: " + ", ".join(p.name for p in PEERS)
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--pg-bin", help="directory with initdb/pg_ctl/pgbench to use instead")
    parser.add_argument("--out", type=Path, help="results directory")
    parser.add_argument("--profile", action="store_true", help="only profile awa's hot paths")
    parser.add_argument("--render", action="store_true", help="only rewrite the report files")
    return parser.parse_args()


class Session:
    """One benchmark run: the server, the systems, the raw results."""

    def __init__(self, args: argparse.Namespace, settings: Settings, out: Path) -> None:
        self.args = args
        self.settings = settings
        self.out = out
        self.logs = BENCH / "results" / "tmp" / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.adapters: dict[str, Adapter] = {}
        self.info: dict[str, dict[str, Any]] = {}
        self.results: dict[str, Any] = {"meta": {}, "runs": []}

    def prepare(self, peers: list[Peer]) -> None:
        systems: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        for peer in peers:
            systems[peer.name] = {"adapter": peer.adapter, "role": peer.role}
            try:
                python = python_for(peer, self.logs / "venvs.log")
                adapter = Adapter(peer, python, self.logs)
                info = adapter.call("describe")
            except (PeerUnavailable, AdapterError, subprocess.CalledProcessError) as exc:
                skipped[peer.name] = str(exc)
                print(f"  skipping {peer.name}: {exc}", flush=True)
                continue
            self.adapters[peer.name] = adapter
            self.info[peer.name] = info
            systems[peer.name].update(version=info["version"], notes=info["notes"], python=python)
        self.results["meta"].update(systems=systems, skipped=skipped)

    def record(self, workload: str, system: str, rep: int, run: Any) -> None:
        began = time.monotonic()
        try:
            result = run()
        except (AdapterError, WorkloadFailed, subprocess.CalledProcessError) as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # keep the other systems' results whatever happens
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
        result.update(
            workload=workload, system=system, rep=rep, seconds=round(time.monotonic() - began, 1)
        )
        self.results["runs"].append(result)
        shown = {
            k: round(v, 1) if isinstance(v, float) else v
            for k, v in result.items()
            if k not in ("workload", "system", "rep")
        }
        print(f"  [{rep}] {workload:<7} {system:<14} {shown}", flush=True)
        self.save()

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1) + "\n")


def run_reps(session: Session, runner: Runner, workloads: list[str], reps: int) -> None:
    names = list(session.adapters)
    rounds = calibrate_work(runner.s.w5_work_ms) if "W5" in workloads else 0
    session.results["meta"]["settings"]["w5_rounds"] = rounds
    for rep in range(1, reps + 1):
        order = names[(rep - 1) % len(names) :] + names[: (rep - 1) % len(names)]
        print(f"repetition {rep}/{reps}: {', '.join(order)}", flush=True)
        each = partial(taking_part, session, order, workloads)

        for name, adapter, info in each("W1"):
            session.record("W1", name, rep, lambda a=adapter, i=info: runner.drain(a, i))
        for processes in runner.s.processes[1:] if "W1xP" in workloads else ():
            for per_process in (False, True):  # 32 handlers split, then 32 in each process
                for name, adapter, info in each("W1xP"):
                    session.record(
                        f"W1x{processes}{'each' if per_process else ''}",
                        name,
                        rep,
                        lambda a=adapter, i=info, p=processes, e=per_process: runner.scale_out(
                            a, i, p, each=e
                        ),
                    )
        for processes in runner.s.w5_processes if "W5" in workloads else ():
            for name, adapter, info in each("W5"):
                session.record(
                    f"W5x{processes}",
                    name,
                    rep,
                    lambda a=adapter, i=info, p=processes: runner.cpu_bound(a, i, p, rounds),
                )
        for name, adapter, info in each("W2"):
            session.record("W2", name, rep, lambda a=adapter, i=info: runner.latency(a, i))
        for name, adapter, _ in each("W3"):
            session.record("W3", name, rep, lambda a=adapter: runner.insert(a))
        for name, adapter, info in each("W4"):
            modes = ["hard", "weighted"] if rep % 2 else ["weighted", "hard"]
            for mode in modes:
                extra = ("--queues", "4", "--mode", mode)
                session.record(
                    "W4",
                    f"{name} {mode}",
                    rep,
                    lambda e=extra, a=adapter, i=info: runner.drain(a, i, *e),
                )
        for name, adapter, info in each("W6"):
            modes = [True, False] if rep % 2 else [False, True]
            for capped in modes:
                label = f"{name} {'capped' if capped else 'uncapped'}"
                session.record(
                    "W6", label, rep, lambda a=adapter, i=info, k=capped: runner.fleet_cap(a, i, k)
                )
        for name, adapter, _ in each("idle"):
            run_idle(session, runner, name, adapter, rep)
        if "ceiling" in workloads:
            session.record("ceiling", "pgbench", rep, runner.ceiling)


def taking_part(
    session: Session, order: list[str], workloads: list[str], workload: str
) -> list[tuple[str, Adapter, dict[str, Any]]]:
    """The systems (in this repetition's order) that run ``workload``, if it was asked for."""
    if workload not in workloads:
        return []
    return [
        (n, session.adapters[n], session.info[n])
        for n in order
        if workload in session.adapters[n].peer.workloads
    ]


def run_idle(session: Session, runner: Runner, name: str, adapter: Adapter, rep: int) -> None:
    """Idle cost for every queue count, one process then ten (unless one already costs
    too much for ten to be measured on a shared machine)."""
    for queues in runner.s.idle_queues:
        single: float | None = None
        for processes in runner.s.idle_processes:
            label = f"idle {queues}q x{processes}"
            if single is not None and processes > 1 and single * processes > runner.s.idle_budget:
                reason = (
                    f"skipped: one process already sends {single:,.0f} statements/s; "
                    f"{processes} would saturate the shared machine"
                )
                session.record(label, name, rep, lambda r=reason: {"skipped": r})
                continue
            session.record(
                label, name, rep, lambda q=queues, p=processes: runner.idle(adapter, q, p)
            )
            last = session.results["runs"][-1]
            if processes == 1:
                single = last.get("statements_per_s")


def calibrate_work(milliseconds: float) -> int:
    """Rounds of ``_common.burn`` that take ``milliseconds`` here (best of 5 trials, so a
    busy moment on the shared machine does not shrink the jobs)."""
    sys.path.insert(0, str(BENCH / "adapters"))
    import _common

    trial = 20_000
    best = min(_timed_burn(_common.burn, trial) for _ in range(5))
    return max(1, round(trial * milliseconds / 1000 / best))


def _timed_burn(burn: Any, rounds: int) -> float:
    began = time.perf_counter()
    burn(rounds)
    return time.perf_counter() - began


def byte_compile_awa() -> None:
    """Compile awa's sources, as pip does when it installs a wheel (the peers come from
    wheels). awa runs from an editable install, and where PYTHONDONTWRITEBYTECODE is set
    (this machine) every process would otherwise compile the modules it imports: ~60 ms
    for the worker's, which ``start()`` imports inside the timed window."""
    compileall.compile_dir(REPO / "src" / "awa", quiet=1)


def refresh_notes(session: Session) -> None:
    """Re-read each adapter's notes (deviations), so an edited note reaches the docs."""
    for peer in PEERS:
        system = session.results["meta"]["systems"].get(peer.name, {})
        if "notes" in system:
            adapter = Adapter(peer, system["python"], session.logs)
            system["notes"] = adapter.call("describe")["notes"]


def plot(results_json: Path, png: Path, scale_out_png: Path) -> None:
    try:
        python = python_for(TOOLS, results_json.parent / "tools.log")
        command = [python, str(BENCH / "plot.py"), str(results_json), str(png), str(scale_out_png)]
        subprocess.run(command, check=True)
    except (PeerUnavailable, subprocess.CalledProcessError) as exc:
        print(f"  no plot: {exc}", flush=True)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanups below
    args = parse_args()
    settings = Settings.quick() if args.quick else Settings()
    reps = args.reps or (1 if args.quick else 3)
    out = args.out or (BENCH / "results" / "tmp" / "quick" if args.quick else BENCH / "results")
    wanted = args.systems.split(",") if args.systems else [p.name for p in PEERS]
    peers = [p for p in PEERS if p.name in wanted]
    workloads = args.workloads.split(",")
    session = Session(args, settings, out)
    if args.render:
        session.results = json.loads((out / "results.json").read_text())
        refresh_notes(session)
        session.save()
        render(session.results, out, args.quick)
        return
    with tempfile.TemporaryDirectory(prefix="awa-bench-") as work:
        server, source = start_server(args.pg_bin, Path(work), profiling=args.profile)
        try:
            if args.profile:
                profile_awa(server, settings, BENCH / "results", session.logs)
                return
            print(f"server: {source}; preparing systems", flush=True)
            byte_compile_awa()
            session.prepare(peers)
            session.results["meta"].update(
                command=shlex.join(["python", "bench/run.py", *sys.argv[1:]]),
                started=datetime.now(UTC).isoformat(timespec="seconds"),
                machine=machine.describe(),
                server=server.describe(),
                server_source=source,
                settings={**settings.__dict__, "reps": reps},
            )
            run_reps(session, Runner(server, settings), workloads, reps)
        finally:
            server.close()
    session.results["meta"]["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    session.save()
    render(session.results, out, args.quick)


def render(results: dict[str, Any], out: Path, quick: bool) -> None:
    """results.md and results.png beside results.json; docs/benchmarks.md for a full run."""
    write_results_md(results, out / "results.md")
    scale_out = out / "scale-out.png"
    scale_out.unlink(missing_ok=True)  # a run without W1×P plots none
    plot(out / "results.json", out / "results.png", scale_out)
    if out == BENCH / "results" and not quick:
        docs = REPO / "docs" / "benchmarks.md"
        profile = BENCH / "results" / "profile.md"
        shown = None
        if scale_out.exists():
            shutil.copyfile(scale_out, REPO / "docs" / "scale-out.png")
            shown = "scale-out.png"
        write_docs(results, docs, "../bench/results/results.png", profile, scale_out=shown)
        print(f"wrote {docs.relative_to(REPO)}")
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
