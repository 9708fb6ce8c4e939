"""awa.log formatters and configure(), and the JobLog observer's records (no database)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import awa
import awa.log
from awa.service import Periodic
from awa.worker import results
from awa.worker.joblog import JobLog, outcome_name

AWA = logging.getLogger("awa")


@pytest.fixture(autouse=True)
def _restore_awa_logger() -> Iterator[None]:
    handlers, level, propagate = list(AWA.handlers), AWA.level, AWA.propagate
    yield
    for handler in list(AWA.handlers):
        if handler not in handlers:
            AWA.removeHandler(handler)
    AWA.setLevel(level)
    AWA.propagate = propagate


def make_job(**changes: Any) -> awa.Job[Any]:
    now = datetime.now(UTC)
    fields: dict[str, Any] = {
        "id": 42, "kind": "send_email", "queue": "email", "args": {}, "state": awa.JobState.RUNNING,
        "priority": 2, "attempt": 1, "max_attempts": 3, "run_lease": 7, "tags": [],
        "metadata": {}, "progress": None, "errors": [], "created_at": now, "run_at": now,
        "attempted_at": now, "deadline_at": None, "finalized_at": None,
    }  # fmt: skip
    fields.update(changes)
    return awa.Job(**fields)


def test_json_lines_carry_message_level_and_structured_fields() -> None:
    stream = io.StringIO()
    awa.log.configure(json=True, level="DEBUG", stream=stream, propagate=False)
    AWA.info("job %s failed", 7, extra={"event": "job_failed", "queue": "q", "job_id": 7})
    try:
        raise ValueError("bad")
    except ValueError:
        AWA.exception("with a traceback", extra={"queue": "q"})
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "job 7 failed" and first["level"] == "INFO"
    assert first["logger"] == "awa" and first["ts"].endswith("+00:00")
    assert first["event"] == "job_failed" and first["queue"] == "q" and first["job_id"] == 7
    assert "args" not in first and "exc" not in first
    assert second["level"] == "ERROR" and "ValueError: bad" in second["exc"]


def test_text_lines_append_the_fields_and_configure_replaces_its_handler() -> None:
    first, stream = io.StringIO(), io.StringIO()
    awa.log.configure(stream=first, propagate=False)
    handler = awa.log.configure(stream=stream, level=logging.WARNING, propagate=False)
    assert [h for h in AWA.handlers if getattr(h, "_awa_configured", False)] == [handler]
    AWA.info("not shown at WARNING")
    AWA.warning("queue %s: refused", "email", extra={"queue": "email", "override": "rate_limit"})
    assert first.getvalue() == ""
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("WARNING awa: queue email: refused [queue=email override=rate_limit]")


def test_a_handlers_error_text_cannot_write_a_record_of_its_own() -> None:
    """Line breaks in an error's text wrote a second, forged record into a text log, and
    U+2028 split a JSON record for Python's splitlines() (a review)."""
    forged = "boom\n2026-12-07 20:00:00,000 INFO awa: job 424242 cancelled\u2028x"
    for json_lines in (False, True):
        stream = io.StringIO()
        awa.log.configure(json=json_lines, stream=stream, propagate=False)
        try:
            raise ValueError(f"alert not sent: {forged}")  # a hook's error quoting the job's
        except ValueError:
            AWA.exception("job 1 failed: %s", forged, extra={"reason": forged})
        head, *traceback = stream.getvalue().splitlines()
        assert "job 424242" in head  # the text is there, in its own record's line
        assert json_lines or "ValueError: alert not sent: boom" in traceback
        assert not any(line[:1].isdigit() for line in traceback)  # none reads as a record
        if json_lines:
            assert json.loads(head)["reason"] == forged


def test_job_records_carry_queue_kind_id_and_lease(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="awa")
    job = make_job()
    log = JobLog()
    log.job_started(job, 0.25)
    retry = results.from_exception(job, RuntimeError("smtp down"))
    log.job_finished(job, retry, 0.5)
    log.outcomes_applied([retry, results.from_return(job, None)])
    last = make_job(attempt=3)
    log.outcomes_applied([results.from_exception(last, RuntimeError("still down"))])
    log.outcomes_stale([results.from_return(job, None)])
    events = [(r.event, r.levelno) for r in caplog.records]  # type: ignore[attr-defined]
    assert events == [
        ("job_started", logging.DEBUG),
        ("job_finished", logging.DEBUG),
        ("job_retried", logging.INFO),
        ("job_failed", logging.WARNING),
        ("outcome_stale", logging.INFO),
    ]
    for record in caplog.records:
        fields = awa.log.structured_fields(record)
        assert fields["queue"] == "email" and fields["kind"] == "send_email"
        assert fields["job_id"] == 42 and fields["run_lease"] == 7
    assert caplog.records[2].reason == "smtp down"  # type: ignore[attr-defined]
    assert "still down" in caplog.records[3].getMessage()


def test_per_job_debug_records_cost_nothing_when_debug_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    AWA.setLevel(logging.INFO)

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("formatted a DEBUG record while DEBUG is off")

    monkeypatch.setattr(AWA, "debug", forbidden)
    job = make_job()
    log = JobLog()
    log.job_started(job, 0.1)
    log.job_finished(job, results.from_return(job, None), 0.1)
    log.outcomes_applied([results.from_return(job, None)])


def test_a_hand_back_is_named_apart_from_a_snooze(caplog: pytest.LogCaptureFixture) -> None:
    """A job given back for want of a handler ran nothing: the metrics' outcome label and
    the log call it ``handed_back``, not ``snoozed`` (which a handler chose)."""
    caplog.set_level(logging.DEBUG, logger="awa")
    job = make_job()
    handed = results.handed_back(job)
    snoozed = results.from_return(job, awa.Snooze(5))
    assert outcome_name(handed) == "handed_back" and outcome_name(snoozed) == "snoozed"
    JobLog().outcomes_applied([handed, snoozed])
    events = [r.event for r in caplog.records if hasattr(r, "event")]
    assert events[-2:] == ["job_handed_back", "job_snoozed"]


def test_a_wait_for_a_callback_and_a_stop_from_outside_are_named_for_what_they_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="awa")
    job = make_job()
    log = JobLog()
    parked = results.Finalization(job, awa.JobState.WAITING_EXTERNAL)
    log.outcomes_applied([parked])
    log.attempt_stopped(job, "cancelled")
    log.job_finished(job, None, 0.1)
    records = [r for r in caplog.records if hasattr(r, "event")]
    assert [(r.event, r.levelno) for r in records] == [  # type: ignore[attr-defined]
        ("job_waiting_external", logging.DEBUG),
        ("job_stopped", logging.INFO),
        ("job_finished", logging.DEBUG),
    ]
    assert "cancelled by an operator" in records[1].getMessage()
    assert records[2].outcome == "stopped"  # type: ignore[attr-defined]
    # A handler stopped by the worker's shutdown: the job came back retryable with no
    # line saying why (a review).
    caplog.clear()
    log.attempt_stopped(job, "shutdown")
    (stopped,) = caplog.records
    assert stopped.levelno == logging.INFO and "shutdown" in stopped.getMessage()
    caplog.clear()  # on its last attempt the job fails: "goes back" was untrue (a review)
    log.attempt_stopped(make_job(attempt=3, max_attempts=3), "shutdown")
    assert "last attempt" in caplog.records[0].getMessage()


async def test_a_loop_step_failing_names_its_fault_and_traces_what_is_not_the_database(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A retried loop logs the database failing as one line, and anything else (a fault
    in the code) with its type and traceback: it once logged ``promote: `` and no more."""
    faults: list[Exception] = [
        psycopg.OperationalError("server closed the connection"),
        AssertionError(),
    ]
    stepped = asyncio.Event()

    async def tick() -> None:
        if not faults:
            stepped.set()
            return
        raise faults.pop(0)

    service = Periodic("promote", 0.001, tick)
    with caplog.at_level(logging.WARNING, logger="awa"):
        service.start()
        await asyncio.wait_for(stepped.wait(), timeout=5)
        await service.stop()
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("promote: OperationalError: server closed the connection", False),
        ("promote: AssertionError", True),
    ]


def test_an_exception_whose_str_fails_is_still_the_attempts_failure() -> None:
    """Its outcome went unwritten ("unexpected error running job"): the job sat running
    until the heartbeat rescue, retried at once, its own error lost, a TerminalError
    retried."""

    class Broken(awa.TerminalError):
        def __str__(self) -> str:
            raise AttributeError("detail")

    class NotText(Exception):
        def __str__(self) -> str:
            return 42  # type: ignore[return-value]

    failed = results.from_exception(make_job(), Broken())
    assert failed.state is awa.JobState.FAILED and failed.error is not None
    assert failed.error["error"] == "<Broken: str() failed with AttributeError>"
    assert failed.error["type"].endswith("Broken")
    retried = results.from_exception(make_job(), NotText())
    assert retried.state is awa.JobState.RETRYABLE and retried.error is not None
    assert "str() failed with TypeError" in retried.error["error"]
    cancel = results.from_return(make_job(), awa.Cancel(reason=NotText()))  # type: ignore[arg-type]
    assert cancel.error is not None and "str() failed" in cancel.error["error"]


def test_a_fault_with_a_multi_line_message_is_one_line() -> None:
    """libpq's "connection refused" carries a second line ("Is the server running…"); a
    text log split one event over two lines, stored by collectors as two (a review)."""
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5 failed: '
        "Connection refused\n\tIs the server running on that host?"
    )
    assert awa.log.fault(refused) == (
        'OperationalError: connection failed: connection to server at "127.0.0.1", port 5 '
        "failed: Connection refused Is the server running on that host?"
    )
    assert awa.log.fault(TimeoutError()) == "TimeoutError"
