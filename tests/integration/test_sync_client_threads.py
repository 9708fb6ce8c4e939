"""The blocking Client as web applications use it: forked after creation (gunicorn's
``--preload``), closed while other threads are mid-call, started from several threads,
interrupted while blocked."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import awa
from tests.helpers import noop_task, wait_until


def _with_name(url: str, name: str) -> str:
    return conninfo.make_conninfo(url, application_name=name)


def _sessions(db: psycopg.Connection[Any], name: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
    ).fetchone()
    return int(row[0]) if row else -1


def _wait_child(pid: int, timeout: float = 30) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


def test_a_client_made_before_a_fork_works_in_the_child_and_spares_the_parent(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    with awa.Client(database_url) as client:
        client.insert({"who": "parent"}, kind="k", queue="q")  # the pool is open
        pool = client.async_client._pool
        assert pool is not None
        pid = os.fork()
        if pid == 0:  # the child: its own loop and connections; the parent's untouched
            code = 1
            try:
                said = _Said()
                logging.getLogger("asyncio").addHandler(said)
                client.insert({"who": "child"}, kind="k", queue="q")
                code = 0 if len(client.list_jobs(queue="q")) == 2 else 2
                client.close()
                del client, pool
                gc.collect()  # what an inherited connection would say when collected
                if said.lines:  # the parent's pool tasks, collected: "Task was destroyed"
                    code = 3
            finally:
                os._exit(code)
        assert _wait_child(pid) == 0
        client.insert({"who": "parent again"}, kind="k", queue="q")
        assert pool.dead_discarded == 0  # no parent session was ended by the child
        assert client.async_client._pool is pool
    rows = db.execute("SELECT args->>'who' FROM awa.jobs ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["parent", "child", "parent again"]


class _Said(logging.Handler):
    """The records logged to it, as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_client_collected_unclosed_warns_and_lets_go_of_its_thread_and_session(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """A client made per request and never closed kept its loop thread and a server
    session for the life of the process, silently (a review)."""
    url = _with_name(database_url, "awa_unclosed_test")
    client = awa.Client(url)
    client.insert({}, kind="k", queue="q")
    thread = client._portal._thread
    assert _sessions(db, "awa_unclosed_test") >= 1
    with pytest.warns(ResourceWarning, match="garbage collected without close"):  # noqa: PT031
        del client  # (collected here: nothing else refers to it)
        gc.collect()
    thread.join(timeout=15)
    assert not thread.is_alive()
    wait_until(lambda: _sessions(db, "awa_unclosed_test") == 0)


def test_a_child_dropping_the_parents_client_unused_says_nothing(database_url: str) -> None:
    """It is the parent's to close: the child's warning said it was being closed, and
    nothing was (a review)."""
    client = awa.Client(database_url)
    client.queue_stats()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                del client
                gc.collect()
            # (only awa's: the collection may find the garbage of earlier tests too)
            code = 3 if any("awa.Client" in str(w.message) for w in said) else 0
        finally:
            os._exit(code)
    try:
        assert _wait_child(pid) == 0
        assert client.queue_stats() == []  # the parent's goes on
    finally:
        client.close()


def test_close_cancels_the_calls_in_flight_and_leaves_no_session(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    url = _with_name(database_url, "awa_close_test")
    client = awa.Client(url, max_connections=4)
    client.insert({}, kind="k", queue="q")
    outcomes: list[str] = []
    started = threading.Barrier(4)

    def busy() -> None:
        started.wait(10)
        try:
            with client.transaction() as tx:
                tx.execute("SELECT pg_sleep(30)")
            outcomes.append("finished")
        except awa.ClientClosed:
            outcomes.append("closed")
        except Exception as exc:  # anything else is a defect
            outcomes.append(repr(exc))

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    started.wait(10)

    def sleeping() -> bool:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'awa_close_test' "
            "AND query LIKE 'SELECT pg_sleep%%' AND state = 'active'"
        ).fetchone()
        return row is not None and row[0] == 3

    deadline = time.monotonic() + 10
    while not sleeping():
        assert time.monotonic() < deadline, "the three sleeps never started"
        time.sleep(0.02)
    client.close()
    for t in threads:
        t.join(15)
    assert outcomes == ["closed"] * 3
    deadline = time.monotonic() + 10
    while _sessions(db, "awa_close_test"):
        left = db.execute(
            "SELECT state, query, backend_start FROM pg_stat_activity "
            "WHERE application_name = 'awa_close_test'"
        ).fetchall()
        assert time.monotonic() < deadline, f"sessions left open after close(): {left}"
        time.sleep(0.05)
    with pytest.raises(awa.ClientClosed):
        client.insert({}, kind="k", queue="q")


def test_start_from_several_threads_starts_one_worker(sync_client: awa.Client) -> None:
    noop_task(sync_client)
    results: list[str] = []
    gate = threading.Barrier(3)

    def start() -> None:
        gate.wait(10)
        try:
            sync_client.start([("q", 1)])
            results.append("started")
        except awa.ValidationError as exc:
            results.append(exc.field)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    sync_client.shutdown()
    assert sorted(results) == ["start", "start", "started"]
    assert not any(t.name.startswith("awa-job") for t in threading.enumerate())


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt, as in a terminal: a suite started in the background
    by a non-interactive shell inherits SIGINT ignored, and Python then keeps it so."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupted_call_is_cancelled_not_carried_out(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    client = awa.Client(database_url, max_connections=1)
    try:
        client.insert({}, kind="warm", queue="q")
        hold = client.transaction()  # the only connection: the insert below must wait
        tx = hold.__enter__()
        tx.execute("SELECT 1")
        seen, released = threading.Event(), threading.Event()

        def interrupt_from_another_thread() -> None:
            # As the kernel may deliver a Ctrl-C: to a thread other than the caller's,
            # which must still see it while it waits (it once saw it only once the call
            # had ended). If it does not, the wait is ended here, and the job inserted.
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            if not seen.wait(10):
                hold.__exit__(None, None, None)
                released.set()

        interrupt = threading.Timer(0.3, interrupt_from_another_thread)
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            client.insert({}, kind="interrupted", queue="q")
        seen.set()
        interrupt.join()
        if not released.is_set():
            hold.__exit__(None, None, None)
        client.insert({}, kind="after", queue="q")  # the connection is free again
    finally:
        client.close()
    kinds = [r[0] for r in db.execute("SELECT kind FROM awa.jobs ORDER BY id").fetchall()]
    assert kinds == ["warm", "after"]


def test_a_call_that_raises_timeout_error_raises_it(database_url: str) -> None:
    """The caller waits in slices; a call's own TimeoutError once read as a slice ending,
    and the caller waited for ever."""

    async def times_out() -> None:
        raise TimeoutError("an endpoint timed out")

    client = awa.Client(database_url)
    try:
        with pytest.raises(TimeoutError, match="endpoint"):
            client._portal.call(times_out())
    finally:
        client.close()
