"""``awa worker --processes N``: real supervisors with real worker processes.

A SIGKILLed child is restarted and nothing is lost; SIGTERM drains every child and exits 0;
one ``/metrics`` covers every child; ``awa runtime list`` shows them all. Judged from the
executions the handlers recorded (``chaos_exec``, with their pid) and the audited state
changes, not from the supervisor's own words alone.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import awa
from tests.chaos.support import ROOT, SUPERVISED_APP, Supervised, check_history, install_audit
from tests.conftest import PgServer
from tests.helpers import CHILD_PYTHONPATH, wait_for, wait_until

pytestmark = pytest.mark.chaos


@pytest.fixture
def supervise(database_url: str) -> Iterator[Any]:
    started: list[Supervised] = []

    def start(*args: str, url: str | None = None, **env: str) -> Supervised:
        sup = Supervised(url or database_url, *args, **env)
        started.append(sup)
        return sup

    yield start
    for sup in started:
        sup.kill()


def _states(db: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(db.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall())


def _pids_that_ran(db: psycopg.Connection[Any]) -> dict[int, int]:
    return dict(db.execute("SELECT pid, count(*) FROM public.chaos_exec GROUP BY pid").fetchall())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_sigkilled_child_is_restarted_and_nothing_is_lost(
    client: awa.AsyncClient, db: psycopg.Connection[Any], supervise: Any
) -> None:
    install_audit(db)
    sup = supervise("--processes", "2", "--queue", "fleet=4")
    pids = sup.child_pids(2)
    jobs = await client.insert_many(
        [{"ms": 100} for _ in range(300)], kind="fleet_sleep", queue="fleet"
    )
    victim = pids[1]

    async def victim_is_busy() -> bool:
        return _pids_that_ran(db).get(victim, 0) >= 10 and _states(db).get("running", 0) >= 4

    await wait_for(victim_is_busy, timeout=60)
    os.kill(victim, signal.SIGKILL)
    sup.wait_line(rf"process 1 \(pid {victim}\) was killed by SIGKILL; restarting it in")
    restarted = int(sup.wait_line(r"process 1 restarted \(pid (\d+)\)").group(1))
    assert restarted != victim and _pid_alive(restarted)

    async def all_completed() -> bool:
        return _states(db) == {"completed": len(jobs)}

    await wait_for(all_completed, timeout=90)
    check_history(db, {job.id for job in jobs})  # none lost, none finalised twice

    async def restarted_child_listed() -> bool:
        live = {i.pid for i in await client.list_runtime_instances()}
        return {pids[0], restarted} <= live

    await wait_for(restarted_child_listed, timeout=30)  # `awa runtime list` shows it
    assert sup.stop() == 0


def test_a_stop_during_a_restart_delay_is_a_clean_stop(supervise: Any) -> None:
    """A child that crashed (and was reported then) and waits out its restart delay when
    SIGTERM comes has nothing to drain: the stop exits 0, not 1 (a review's soak)."""
    sup = supervise("--processes", "2", "--queue", "fleet=2")
    pids = sup.child_pids(2)
    os.kill(pids[1], signal.SIGKILL)
    sup.wait_line(rf"process 1 \(pid {pids[1]}\) was killed by SIGKILL; restarting it in")
    assert sup.stop() == 0
    if not any("process 1 restarted" in line for line in sup.lines):  # stopped in the delay
        assert sup.wait_line(r"exit statuses \[0, 'not running'\]")


@pytest.mark.parametrize(
    "signalled",
    ["the supervisor", "every process at once", "by SIGHUP", "twice", "by SIGHUP twice"],
)
async def test_sigterm_drains_every_child_and_exits_0(
    signalled: str, client: awa.AsyncClient, db: psycopg.Connection[Any], supervise: Any
) -> None:
    """Also when a service manager signals every process of the unit (systemd's
    KillMode=control-group): a child then gets SIGTERM twice, its own and the supervisor's,
    and took the second as "exit now", leaving its jobs running (a review). SIGHUP (the
    terminal hung up) killed the supervisor on the spot; it now stops as SIGTERM does.
    One event delivers some signals twice (``timeout`` sends SIGTERM to the command and
    then to its group; a hang-up comes from the shell and from the kernel): the copy
    killed every child mid-job (a review: two runs in three)."""
    install_audit(db)
    sup = supervise("--processes", "2", "--queue", "fleet=3", "--shutdown-timeout-ms", "20000")
    pids = sup.child_pids(2)

    async def both_listed() -> bool:
        instances = await client.list_runtime_instances()
        return {i.pid for i in instances} == set(pids.values())

    await wait_for(both_listed, timeout=30)  # `awa runtime list` shows every child
    jobs = await client.insert_many(
        [{"ms": 1_500} for _ in range(6)], kind="fleet_sleep", queue="fleet"
    )

    async def all_running() -> bool:
        return _states(db).get("running", 0) == 6

    await wait_for(all_running, timeout=30)
    if signalled == "every process at once":
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
    sig = signal.SIGHUP if signalled.startswith("by SIGHUP") else signal.SIGTERM
    if signalled.endswith("twice"):  # the copy once the first was taken (never merged)
        sup.proc.send_signal(sig)
        sup.wait_line(rf"{sig.name}: stopping 2 worker processes")
    assert sup.stop(sig=sig) == 0
    # Every handler ran to its end in the process that claimed it, both processes busy.
    ran = _pids_that_ran(db)
    assert ran == {pids[0]: 3, pids[1]: 3}
    assert _states(db) == {"completed": 6}
    check_history(db, {job.id for job in jobs})
    assert not any(_pid_alive(pid) for pid in pids.values())
    assert await client.list_runtime_instances() == []  # each deregistered on its way out
    assert sup.wait_line(r"all worker processes stopped \(exit statuses \[0, 0\]\)")
    if signalled.endswith("twice"):
        assert sup.wait_line(rf"{sig.name} again within 1 s: the same stop")


async def test_set_flags_reach_every_child(client: awa.AsyncClient, supervise: Any) -> None:
    """``--set`` gives ``start()`` settings to every worker process; a reviewer had to wrap
    ``start()`` to run the command with short leases."""
    short_leases = ["--set", "heartbeat_interval_ms=700", "--set", "heartbeat_staleness_ms=4321"]
    sup = supervise("--processes", "2", "--queue", "fleet=1", *short_leases)
    pids = sup.child_pids(2)

    async def both_published() -> list[int | None] | None:
        instances = await client.list_runtime_instances()
        if {i.pid for i in instances} != set(pids.values()):
            return None
        return [i.snapshot.heartbeat_staleness_ms if i.snapshot else None for i in instances]

    assert await wait_for(both_published, timeout=30) == [4321, 4321]
    assert sup.stop() == 0


async def test_one_metrics_endpoint_covers_every_child(
    client: awa.AsyncClient, db: psycopg.Connection[Any], supervise: Any
) -> None:
    install_audit(db)
    sup = supervise("--processes", "2", "--queue", "fleet=2", "--metrics-port", "0")
    url = sup.wait_line(r"metrics of all worker processes on (http://\S+)").group(1)
    pids = sup.child_pids(2)
    jobs = await client.insert_many(
        [{"ms": 300} for _ in range(12)], kind="fleet_sleep", queue="fleet"
    )

    async def all_completed() -> bool:
        return _states(db) == {"completed": len(jobs)}

    await wait_for(all_completed, timeout=60)
    ran = _pids_that_ran(db)
    assert set(ran) == set(pids.values())  # 2 permits each: both processes had to run jobs

    def scrape() -> dict[str, list[Any]]:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return {f.name: f.samples for f in text_string_to_metric_families(text)}

    def counted() -> dict[str, list[Any]] | None:
        families = scrape()
        completed = [s for s in families.get("awa_jobs", []) if s.name == "awa_jobs_total"]
        return families if sum(s.value for s in completed) == len(jobs) else None

    families = wait_until(counted, timeout=30)
    by_process = {
        s.labels["process"]: s.value for s in families["awa_jobs"] if s.name == "awa_jobs_total"
    }
    # What each child's counters say is what its pid actually ran.
    assert by_process == {str(i): float(ran[pid]) for i, pid in pids.items()}
    assert {s.labels["process"] for s in families["awa_queue_in_flight"]} == {"0", "1"}
    up = {s.labels["process"]: s.value for s in families["awa_supervisor_process_up"]}
    assert up == {"0": 1.0, "1": 1.0}
    # Database-wide gauges once, not once per child.
    depth = [s for s in families["awa_queue_depth"] if s.labels["queue"] == "fleet"]
    assert len(depth) == 5 and all("process" not in s.labels for s in depth)
    assert sup.stop() == 0


def test_a_child_failing_before_any_worker_ran_stops_the_supervisor(
    pg_server: PgServer, supervise: Any
) -> None:
    # A database without the awa schema: every child fails at start, as one worker would.
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS awa_supervisor_unmigrated")
        admin.execute("CREATE DATABASE awa_supervisor_unmigrated")
    try:
        sup = supervise(
            "--processes", "2", "--queue", "fleet=1",
            url=pg_server.url_for("awa_supervisor_unmigrated"),
        )  # fmt: skip
        assert sup.proc.wait(60) == 1
        sup.wait_line(r"process \d exited with status 1 before any worker ran")
        assert not any("restarting" in line for line in sup.lines)
    finally:
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS awa_supervisor_unmigrated WITH (FORCE)")


async def test_an_application_that_sets_uvloop_still_gets_its_children(
    client: awa.AsyncClient, db: psycopg.Connection[Any], supervise: Any
) -> None:
    # The supervisor imports the module to check it, which sets uvloop's policy there;
    # uvloop cannot start a process in a group of its own. The fleet used to start no
    # child at all and say nothing.
    install_audit(db)
    sup = supervise("--processes", "2", "--queue", "fleet=2", app="tests.apps.uvloop_app:client")
    sup.child_pids(2)
    job = await client.insert({"ms": 1}, kind="fleet_sleep", queue="fleet")

    async def completed() -> bool:
        return _states(db) == {"completed": 1}

    await wait_for(completed, timeout=30)
    assert _pids_that_ran(db).keys() <= set(sup.child_pids(2).values())
    assert sup.stop() == 0
    assert (await client.get_job(job.id)).state == awa.JobState.COMPLETED


def test_a_stop_while_the_children_start_is_a_clean_stop(supervise: Any, tmp_path: Any) -> None:
    marker = tmp_path / "importing"
    sup = supervise(
        "--processes", "2", "--queue", "fleet=1", app="tests.apps.slow_start_app:client",
        AWA_TEST_IMPORT_MARKER=str(marker),
    )  # fmt: skip
    wait_until(lambda: len(list(tmp_path.glob("importing.*"))) == 2, timeout=60)
    # Both children are importing the application: no worker runs, no job is held.
    assert sup.stop() == 0
    # each child, stopped mid-import, exits 0 saying so (awa.cli.early_signals)
    sup.wait_line(r"all worker processes stopped \(exit statuses \[0, 0\]\)")


def test_children_of_a_killed_supervisor_drain_and_say_why(supervise: Any) -> None:
    """SIGKILL of the supervisor: each child sees its link close and shuts down (it said
    nothing of why, a review), then exits."""
    sup = supervise("--processes", "2", "--queue", "fleet=2")
    pids = sup.child_pids(2)
    sup.proc.kill()
    wait_until(lambda: not any(_pid_alive(pid) for pid in pids.values()), timeout=60)
    wait_until(
        lambda: sum("the supervisor is gone: shutting down" in line for line in sup.lines) == 2
    )


async def test_a_supervisor_whose_stderr_is_gone_still_restarts_and_stops(
    client: awa.AsyncClient, database_url: str
) -> None:
    """Its notes raised on a hung-up terminal or a pipe whose reader died (EIO, EPIPE):
    the note of a SIGTERM came before the stop was set, so every stop signal was lost,
    and the note of a crash killed the task that restarts the child (a review: the fleet
    of a dropped ssh session could only be SIGKILLed)."""
    proc = _supervisor_on_a_pipe(database_url)
    try:
        assert proc.stderr is not None
        started = _child_pids(proc.stderr, 2)
        proc.stderr.close()  # the reader is gone: every later note meets EPIPE
        os.kill(started[1], signal.SIGKILL)

        async def replaced() -> bool:
            pids = {i.pid for i in await client.list_runtime_instances()}
            return started[0] in pids and bool(pids - set(started))

        await wait_for(replaced, timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _supervisor_on_a_pipe(database_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "awa", "worker", SUPERVISED_APP, "--processes", "2",
         "--queue", "fleet=2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "AWA_DATABASE_URL": database_url, "PYTHONPATH": CHILD_PYTHONPATH},
    )  # fmt: skip


def _child_pids(stream: Any, processes: int) -> list[int]:
    """The pids of the first start of each child, read from the supervisor's notes."""
    pids: dict[int, int] = {}
    seen: list[str] = []
    while len(pids) < processes:
        line = stream.readline()
        assert line, f"the supervisor ended before its children ran: {seen}"
        seen.append(line)
        if match := re.search(r"process (\d+) running \(pid (\d+)\)", line):
            pids[int(match.group(1))] = int(match.group(2))
    return [pids[i] for i in range(processes)]
