"""Soak: minutes of mixed load on an embedded server, a worker killed with SIGKILL every
minute and restarted, then a report — jobs lost and jobs finalised twice must be 0.

    python bench/soak.py [--minutes 10] [--quick] [--rate 200] [--kill-every 60]
                         [--freeze-every 90] [--json F]
    make soak                          # the 10-minute run
    make soak SOAK_ARGS=--quick        # 1 minute, a kill every 20 s, a freeze at 30 s

Load: ``--rate`` jobs/s inserted with ``insert_many`` every 100 ms; handlers of 5–50 ms
(5 % of them 0.5–2 s, so that kills catch jobs in flight); 5 % fail their first attempt
(then retry and succeed), 1 % fail for good (``TerminalError``), 3 % snooze once, 2 % are
cancelled by the producer within 50 ms of their insert. Stuck handlers: 0.5 % of the
jobs go to a second queue (``soak_hang``, 1 s deadline) whose plain ``def`` handler blocks
for 8 s on its first attempt — the worker abandons it past the deadline (ADR 0016) and
the retry completes. Two worker processes: the
*survivor* runs throughout (its RSS is sampled), the *victim* is SIGKILLed every
``--kill-every`` s and restarted at once. Frozen leader: every ``--freeze-every`` s the
worker holding the maintenance lease is stopped (SIGSTOP) for longer than its lease
(5 s here) and then resumed — the other worker must take the lease over (counted) and
the woken one must step down without acting on its stale epoch (ADR 0019); its jobs'
heartbeats go stale meanwhile, so they are rescued and run elsewhere, and the late
outcomes of the resumed worker must be fenced.

Evidence is in the database. A row trigger logs every state change of ``awa.jobs`` with
the row's ``(run_lease, attempted_at)`` in ``soak_transitions`` (in the transaction that
made it, so a change is logged iff it committed); each handler logs its execution with
its attempt's fencing key in ``soak_exec`` before it returns. After the drain:

- *lost*: an inserted job missing, or not in a final state;
- *double-finalised*: a job with more than one transition into a final state;
- *completed by a fenced attempt*: a completion whose key is not the job's latest claim,
  or that no execution holding that key logged.

The report format and measured numbers are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

import awa
from awa.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "soak"
HANG_QUEUE = "soak_hang"  # 1 s deadline; first attempts block far past it
HANG_S = 8.0
WORKER_SETTINGS = {
    "heartbeat_interval_ms": 1_000,
    "heartbeat_staleness_ms": 5_000,
    "heartbeat_rescue_interval_ms": 1_000,
    "deadline_rescue_interval_ms": 5_000,
    "leader_election_interval_ms": 1_000,
    "leader_lease_ms": 5_000,
}
FREEZE_S = 10.0  # past the lease: the other worker takes it over meanwhile
AUDIT_DDL = """
CREATE TABLE soak_exec (
    job_id       bigint NOT NULL,
    run_lease    bigint NOT NULL,
    attempted_at timestamptz NOT NULL,
    run_at       timestamptz NOT NULL,
    pid          integer NOT NULL
);
CREATE TABLE soak_transitions (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       bigint NOT NULL,
    new_state    text NOT NULL,
    run_lease    bigint NOT NULL,
    attempted_at timestamptz
);
CREATE FUNCTION soak_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO soak_transitions (job_id, new_state, run_lease, attempted_at)
    VALUES (NEW.id, NEW.state::text, NEW.run_lease, NEW.attempted_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER soak_log AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION soak_log();
"""

# -- the worker process (python bench/soak.py worker) ------------------------------------


def worker_main() -> None:
    """Run handlers until SIGTERM; print "ready" once the worker runs."""
    client = awa.AsyncClient(max_connections=12)
    records: AsyncConnectionPool | None = None
    logging.getLogger("awa").setLevel(logging.ERROR)  # the evidence is in the database

    @client.task(None, kind="soak", queue=QUEUE)
    async def soak(job: awa.Job[Any]) -> awa.Snooze | None:
        args = job.args
        if args.get("snooze") and job.run_lease == 1:
            return awa.Snooze(0.5)  # the next claim has a higher lease: it runs then
        await asyncio.sleep(args["ms"] / 1000)
        if args.get("terminal"):
            raise awa.TerminalError("soak: failing for good")
        if args.get("fail") and job.attempt == 1:
            raise RuntimeError("soak: failing the first attempt")
        assert records is not None and job.attempted_at is not None
        async with records.connection() as conn:  # logged before the outcome is submitted
            await conn.execute(
                "INSERT INTO soak_exec (job_id, run_lease, attempted_at, run_at, pid) "
                "VALUES (%s, %s, %s, %s, %s)",
                (job.id, job.run_lease, job.attempted_at, job.run_at, os.getpid()),
            )
        return None

    @client.task(None, kind="soak_hang", queue=HANG_QUEUE)
    def soak_hang(job: awa.Job[Any]) -> None:
        if job.attempt == 1:
            time.sleep(HANG_S)  # abandoned past its deadline; what it returns is ignored
            return
        assert job.attempted_at is not None
        with psycopg.connect(client.database_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO soak_exec (job_id, run_lease, attempted_at, run_at, pid) "
                "VALUES (%s, %s, %s, %s, %s)",
                (job.id, job.run_lease, job.attempted_at, job.run_at, os.getpid()),
            )

    async def main() -> None:
        nonlocal records
        records = AsyncConnectionPool(client.database_url, min_size=1, max_size=4, open=False)
        await records.open(wait=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        hang = awa.QueueConfig(HANG_QUEUE, max_workers=4, deadline_ms=1_000)
        await client.start([(QUEUE, 32), hang], **WORKER_SETTINGS)
        print("ready", flush=True)
        await stop.wait()
        await client.shutdown(timeout_ms=10_000)
        await client.close()
        await records.close()

    asyncio.run(main())


# -- the orchestrator --------------------------------------------------------------------


@dataclass
class Run:
    """What the orchestrator knows of the run, besides the database."""

    url: str
    minutes: float
    rate: int
    kill_every: float
    freeze_every: float
    inserted: list[int] = field(default_factory=list)
    cancel_requests: int = 0
    kills: int = 0
    freezes: int = 0
    takeovers: int = 0  # freezes during which the other worker took the lease
    rss_kib: list[tuple[float, int]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


def spawn(url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "AWA_DATABASE_URL": url, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, __file__, "worker"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError(f"worker did not start: {line!r}")
    return proc


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def produce(run: Run, client: awa.AsyncClient, until: float) -> None:
    """Insert ``rate`` jobs a second in ticks of 100 ms; cancel about 2 % soon after."""
    rng = random.Random(7)
    per_tick = max(1, run.rate // 10)
    cancels: set[asyncio.Task[None]] = set()
    next_tick = time.monotonic()
    while time.monotonic() < until:
        batch = []
        for _ in range(per_tick):
            roll = rng.random()
            batch.append({
                "ms": rng.randint(500, 2_000) if rng.random() < 0.05 else rng.randint(5, 50),
                "fail": roll < 0.05,
                "terminal": 0.05 <= roll < 0.06,
                "snooze": 0.06 <= roll < 0.09,
            })  # fmt: skip
        jobs = await client.insert_many(batch, kind="soak", queue=QUEUE)
        run.inserted.extend(job.id for job in jobs)
        hung = sum(rng.random() < 0.005 for _ in range(per_tick))
        if hung:
            stuck = await client.insert_many([{}] * hung, kind="soak_hang", queue=HANG_QUEUE)
            run.inserted.extend(job.id for job in stuck)
        for job in jobs:
            if rng.random() < 0.02:
                task = asyncio.create_task(cancel_soon(client, job.id, rng.random() / 20))
                cancels.add(task)
                task.add_done_callback(cancels.discard)
                run.cancel_requests += 1
        next_tick += 0.1
        await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
    await asyncio.gather(*cancels)


async def cancel_soon(client: awa.AsyncClient, job_id: int, delay: float) -> None:
    await asyncio.sleep(delay)
    await client.cancel(job_id)  # a job already finished is left as it is


async def kill_loop(run: Run, victim: list[subprocess.Popen[str]], until: float) -> None:
    """SIGKILL the victim every ``kill_every`` seconds and start a new one at once."""
    while time.monotonic() + run.kill_every < until:
        await asyncio.sleep(run.kill_every)
        victim[0].send_signal(signal.SIGKILL)
        victim[0].wait(30)
        run.kills += 1
        victim[0] = await asyncio.to_thread(spawn, run.url)
        print(f"  t={time.monotonic() - run.started:5.0f}s  killed and restarted the victim",
              flush=True)  # fmt: skip


def lease(url: str) -> tuple[int, int | None]:
    """The lease's epoch and the OS pid of the worker holding it (None: unknown yet)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT l.epoch, r.pid FROM awa.leader_lease AS l "
            "LEFT JOIN awa.runtime_instances AS r ON r.instance_id::text = l.holder "
            "WHERE l.expires_at > clock_timestamp()"
        ).fetchone()
    return (int(row[0]), row[1]) if row else (0, None)


async def freeze_loop(run: Run, until: float) -> None:
    """Every ``freeze_every`` seconds stop the leading worker past its lease, then resume it."""
    while time.monotonic() + run.freeze_every < until:
        await asyncio.sleep(run.freeze_every)
        epoch, pid = await asyncio.to_thread(lease, run.url)
        if pid is None:
            print("  no leader to freeze (not published yet)", flush=True)
            continue
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:  # killed by the kill loop meanwhile
            continue
        await asyncio.sleep(FREEZE_S)
        later, holder = await asyncio.to_thread(lease, run.url)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        run.freezes += 1
        run.takeovers += later > epoch and holder not in (None, pid)
        print(f"  t={time.monotonic() - run.started:5.0f}s  froze the leader (pid {pid}) for "
              f"{FREEZE_S:g} s; lease {'taken over' if later > epoch else 'NOT taken over'}",
              flush=True)  # fmt: skip


async def sample_rss(run: Run, pid: int, until: float) -> None:
    while time.monotonic() < until:
        run.rss_kib.append((time.monotonic() - run.started, rss_kib(pid)))
        await asyncio.sleep(5)


def unfinished(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE state NOT IN ('completed', 'failed', 'cancelled')"
        ).fetchone()
    return int(row[0]) if row else 0


async def soak(run: Run) -> dict[str, Any]:
    survivor = await asyncio.to_thread(spawn, run.url)
    victim = [await asyncio.to_thread(spawn, run.url)]
    until = time.monotonic() + run.minutes * 60
    try:
        async with awa.AsyncClient(run.url) as client:
            await asyncio.gather(
                produce(run, client, until),
                kill_loop(run, victim, until),
                freeze_loop(run, until),
                sample_rss(run, survivor.pid, until),
            )
        print(f"  load stopped after {run.minutes:g} min; draining", flush=True)
        for _ in range(300):  # up to 5 minutes
            if not unfinished(run.url):
                break
            await asyncio.sleep(1)
        run.rss_kib.append((time.monotonic() - run.started, rss_kib(survivor.pid)))
    finally:
        for proc in (survivor, victim[0]):
            proc.send_signal(signal.SIGTERM)
        for proc in (survivor, victim[0]):
            proc.wait(60)
    return report(run)


def report(run: Run) -> dict[str, Any]:
    with psycopg.connect(run.url, autocommit=True) as conn:
        q = conn.execute
        states = dict(q("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall())
        rows = q("SELECT id, state::text FROM awa.jobs WHERE id = ANY(%s)", (run.inserted,))
        present = dict(rows.fetchall())
        final = {"completed", "failed", "cancelled"}
        lost = [i for i in run.inserted if present.get(i) not in final]
        twice = q(
            "SELECT count(*) FROM (SELECT job_id FROM soak_transitions WHERE new_state IN "
            "('completed', 'failed', 'cancelled') GROUP BY job_id HAVING count(*) > 1) AS t"
        ).fetchone()
        fenced = q(FENCED_COMPLETIONS).fetchone()
        executions = q("SELECT count(*), count(DISTINCT job_id) FROM soak_exec").fetchone()
        rescued = q(
            "SELECT count(*) FROM awa.jobs, jsonb_array_elements(errors) AS e "
            "WHERE e ->> 'type' = 'HeartbeatStale'"
        ).fetchone()
        hung = q(
            "SELECT count(*), count(*) FILTER (WHERE state = 'completed'), "
            "count(*) FILTER (WHERE errors::text LIKE '%%DeadlineExceeded%%') "
            "FROM awa.jobs WHERE kind = 'soak_hang'"
        ).fetchone()
        pickup = [
            ms
            for (ms,) in q(
                "SELECT extract(epoch FROM attempted_at - run_at)::float8 * 1000 FROM soak_exec "
                "WHERE run_lease = 1"
            ).fetchall()
        ]
        q("SELECT pg_stat_force_next_flush()")
        tuples = q(
            "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables "
            "WHERE schemaname = 'awa' ORDER BY relname"
        ).fetchall()
    assert twice is not None and fenced is not None and executions is not None
    quantiles = statistics.quantiles(pickup, n=100) if len(pickup) > 1 else [0.0] * 99
    rss = [kib for _, kib in run.rss_kib]
    warm_up_s = min(60.0, run.minutes * 6)  # a tenth of the run, at most a minute
    warm = next((kib for t, kib in run.rss_kib if t >= warm_up_s), rss[-1] if rss else 0)
    return {
        "minutes": run.minutes,
        "rate": run.rate,
        "kills": run.kills,
        "freezes": run.freezes,
        "leader_takeovers": run.takeovers,
        "inserted": len(run.inserted),
        "states": states,
        "cancel_requests": run.cancel_requests,
        "lost": len(lost),
        "lost_sample": lost[:10],
        "double_finalised": int(twice[0]),
        "completed_by_fenced_attempt": int(fenced[0]),
        "executions": int(executions[0]),
        "jobs_executed": int(executions[1]),
        "rescued_stale_heartbeat": int(rescued[0]) if rescued else 0,
        "hung": {"jobs": int(hung[0]), "completed": int(hung[1]), "past_deadline": int(hung[2])}
        if hung
        else {},
        "pickup_ms": {"p50": quantiles[49], "p99": quantiles[98], "max": max(pickup, default=0)},
        "survivor_rss_kib": {
            "after_warmup": warm,
            "end": rss[-1] if rss else 0,
            "max": max(rss, default=0),
        },
        "tables": {
            name: {"live": live, "dead": dead, "autovacuums": vac}
            for name, live, dead, vac in tuples
        },
    }


# A completion is fenced when its key is not the job's latest claim before it, or when
# no execution that logged itself held that key.
FENCED_COMPLETIONS = """
WITH finals AS (
    SELECT seq, job_id, run_lease, attempted_at FROM soak_transitions
    WHERE new_state = 'completed'
), last_claim AS (
    SELECT DISTINCT ON (f.seq) f.seq, c.run_lease, c.attempted_at
    FROM finals AS f
    JOIN soak_transitions AS c ON c.job_id = f.job_id AND c.new_state = 'running'
        AND c.seq < f.seq
    ORDER BY f.seq, c.seq DESC
)
SELECT count(*) FROM finals AS f LEFT JOIN last_claim AS l USING (seq)
WHERE (f.run_lease, f.attempted_at) IS DISTINCT FROM (l.run_lease, l.attempted_at)
   OR NOT EXISTS (SELECT 1 FROM soak_exec AS e WHERE e.job_id = f.job_id
                  AND e.run_lease = f.run_lease AND e.attempted_at = f.attempted_at)
"""


def print_report(r: dict[str, Any]) -> None:
    s = r["states"]
    rss = r["survivor_rss_kib"]
    growth = (
        100 * (rss["end"] - rss["after_warmup"]) / rss["after_warmup"] if rss["after_warmup"] else 0
    )
    p = r["pickup_ms"]
    print(f"""
awa soak: {r["minutes"]:g} min at {r["rate"]} jobs/s, a worker SIGKILLed and restarted {r["kills"]} times
  leader frozen past its lease  {r["freezes"]:>9,}   (lease taken over {r["leader_takeovers"]} times)
  jobs inserted                 {r["inserted"]:>9,}
    completed                   {s.get("completed", 0):>9,}
    failed (TerminalError)      {s.get("failed", 0):>9,}
    cancelled                   {s.get("cancelled", 0):>9,}   ({r["cancel_requests"]:,} cancel requests)
  jobs lost                     {r["lost"]:>9,}   must be 0
  double-finalised              {r["double_finalised"]:>9,}   must be 0
  completed by a fenced attempt {r["completed_by_fenced_attempt"]:>9,}   must be 0
  executions logged             {r["executions"]:>9,}   ({r["executions"] - r["jobs_executed"]:,} more than once: at least once)
  rescued (stale heartbeat)     {r["rescued_stale_heartbeat"]:>9,}
  hung past their deadline      {r["hung"].get("jobs", 0):>9,}   ({r["hung"].get("past_deadline", 0):,} returned past the deadline, {r["hung"].get("completed", 0):,} completed on retry)
  pickup latency (first claim)  p50 {p["p50"]:.1f} ms, p99 {p["p99"]:.1f} ms, max {p["max"]:.0f} ms
  surviving worker RSS          {rss["after_warmup"] / 1024:.1f} MiB after warm-up → {rss["end"] / 1024:.1f} MiB at the end ({growth:+.1f} %), max {rss["max"] / 1024:.1f} MiB
  dead tuples at the end:""")  # noqa: E501
    for name, t in r["tables"].items():
        print(f"    awa.{name:<18} {t['dead']:>8,} dead / {t['live']:>8,} live"
              f"  ({t['autovacuums']} autovacuums)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="1 minute, a kill every 20 s")
    parser.add_argument("--rate", type=int, default=200, help="jobs inserted per second")
    parser.add_argument("--kill-every", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument("--freeze-every", type=float, default=90.0, metavar="SECONDS")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.kill_every, args.freeze_every = 1.0, 20.0, 30.0
    root = tempfile.mkdtemp(prefix="awa-soak-")
    server = EmbeddedPostgres(os.path.join(root, "pgdata"), settings={"max_connections": "200"})
    try:
        url = server.start()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE soak")
        url = url.replace("/postgres?", "/soak?")
        asyncio.run(migrate(url))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(AUDIT_DDL)
        print(f"soak: {args.minutes:g} min, {args.rate} jobs/s, kill every {args.kill_every:g} s, "
              f"freeze the leader every {args.freeze_every:g} s")  # fmt: skip
        run = Run(url, args.minutes, args.rate, args.kill_every, args.freeze_every)
        result = asyncio.run(soak(run))
    finally:
        server.destroy()
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = result["lost"] == result["double_finalised"] == result["completed_by_fenced_attempt"] == 0
    ok = ok and result["leader_takeovers"] == result["freezes"]
    return 0 if ok else 1


async def migrate(url: str) -> None:
    async with awa.AsyncClient(url) as client:
        await client.migrate()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker_main()
    else:
        sys.exit(main())
