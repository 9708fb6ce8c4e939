"""Handlers that do not stop when asked: bounded abandonment (ADR 0016).

A permit stands for a handler the worker still waits for. When an attempt has been asked
to stop — its deadline passed, an operator cancelled it, it lost its lease — its handler
gets ``ABANDON_AFTER_S`` to return. One that is still running then (a plain ``def`` in a
blocking call, a coroutine that swallows its cancellation) is *abandoned*:

* past its deadline, its outcome is written now (``DeadlineExceeded``, retried with
  backoff like any failure), and its permit comes back once that write is done — so the
  job is no longer ``running`` when another takes its slot;
* stopped for its unconfirmed lease (ADR 0055), it is not abandoned at all: it keeps
  its permit and its heartbeats until it returns (``Executor._keep_unconfirmed``);
* cancelled or without its lease, the row has moved on already: its permit comes back
  at once;
* a plain ``def`` handler's thread stops counting against the handler threads, so a new
  one starts in its place; the old thread runs on until its handler returns, and what it
  returns is ignored (the attempt is fenced anyway).

At most ``limit`` handlers (the worker's permits) are abandoned at a time, so a handler
that hangs on every retry cannot grow a process without bound. Beyond that an attempt is
*stuck*: it keeps its permit, and a queue whose every running handler is stuck cannot
make progress — ``health_check()`` and ``awa health --worker`` then report the worker
unhealthy, so an orchestrator restarts it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from awa.worker.attempt import Attempt
from awa.worker.completer import Completer
from awa.worker.results import AttemptKey, Finalization
from awa.worker.threads import HandlerThreads

logger = logging.getLogger("awa")

ABANDON_AFTER_S = 5.0


class Abandoned:
    """The attempts given up on, until their handlers really end."""

    def __init__(self, threads: HandlerThreads, completer: Completer, limit: int) -> None:
        self._threads = threads
        self._completer = completer
        self.limit = max(limit, 1)
        self.attempts: dict[AttemptKey, Attempt] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._warned_full = False

    @property
    def full(self) -> bool:
        """True when no more handlers may be abandoned."""
        self._forget_ended()
        return len(self.attempts) >= self.limit

    def _forget_ended(self) -> None:
        """Drop the attempts whose handlers have returned at last."""
        for key, attempt in list(self.attempts.items()):
            if not attempt.handler_running:
                del self.attempts[key]
                logger.info(
                    "%s: abandoned handler ended after %.0f s", attempt.describe(),
                    time.monotonic() - attempt.started,
                    extra={"event": "abandoned_handler_ended", "job_id": attempt.job.id},
                )  # fmt: skip

    def take(self, attempt: Attempt) -> None:
        """Give up waiting for ``attempt``'s handler; its permit comes back (see above)."""
        attempt.abandoned = True
        self.attempts[attempt.key] = attempt
        if attempt.thread is not None:
            self._threads.abandon(attempt.thread)
        logger.warning(
            "%s: handler still running %.0f s after it was asked to stop (%s); abandoned: "
            "its permit goes back to the queue", attempt.describe(), ABANDON_AFTER_S,
            attempt.cancel_reason,
            extra={"event": "handler_abandoned", "job_id": attempt.job.id,
                   "reason": attempt.cancel_reason},
        )  # fmt: skip
        if attempt.cancel_reason != "deadline":
            attempt.permit.release()
            return
        outcome = attempt.cut_short(" (handler abandoned)")
        task = asyncio.create_task(self._write_then_release(attempt, outcome))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def refused(self, attempt: Attempt) -> None:
        """``attempt`` cannot be abandoned (the bound is reached): it stays stuck."""
        attempt.stuck = True
        if not self._warned_full:
            self._warned_full = True
            logger.error(
                "%s is stuck: %d handlers are abandoned already (the limit); its permit "
                "stays taken and the worker reports itself unhealthy — restart it",
                attempt.describe(), len(self.attempts),
                extra={"event": "handler_stuck", "job_id": attempt.job.id},
            )  # fmt: skip

    def ended(self, attempt: Attempt) -> None:
        """The task of an abandoned attempt ended (its thread may still run)."""
        if not self.full:
            self._warned_full = False

    async def _write_then_release(self, attempt: Attempt, outcome: Finalization) -> None:
        try:
            await self._completer.write(outcome)
        finally:
            attempt.permit.release()

    def per_queue(self) -> dict[str, int]:
        """Abandoned handlers still running, per queue."""
        self._forget_ended()
        counts: dict[str, int] = {}
        for attempt in self.attempts.values():
            counts[attempt.job.queue] = counts.get(attempt.job.queue, 0) + 1
        return counts
