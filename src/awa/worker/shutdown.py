"""Graceful shutdown of a worker, bounded in time whatever its handlers do.

1. Stop claiming (dispatchers), then maintenance (the leader gives its lease up, so
   another worker leads at once, and this process's promoter cannot race the fencing
   below).
2. Give running handlers ``timeout_ms`` to finish.
3. Within a grace of at most ``GRACE_S``: write the outcomes already queued, write the
   progress the attempts still running recorded, fence them back to retryable (so no
   job this process claimed is left ``running``) but held for ``FENCE_HOLD_S``, cancel
   their tasks, let the jobs whose handlers then ended go at once, stop the remaining
   services and deregister.
4. Handlers that are still running then — a plain ``def`` stuck in a thread, a coroutine
   that swallows its cancellation — are abandoned and named in a WARNING. They cannot
   hold the process: handler threads are daemons, and the ``awa`` CLI gives up on tasks
   that ignore cancellation when it exits, within ``FENCE_HOLD_S`` of the fence: their
   jobs are not retried elsewhere while they may still run here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from awa.db import sql
from awa.worker import progress
from awa.worker.attempt import Attempt

if TYPE_CHECKING:
    from awa.worker.runtime import Worker

logger = logging.getLogger("awa")

GRACE_S = 5.0  # for the steps after the handlers' timeout that talk to the database
ABANDON_WAIT_S = 1.0  # for cancelled coroutines to end
# What the awa CLI waits at exit for tasks, then threads, left running (twice its
# EXIT_GRACE_S, awa.cli.loop).
CLI_EXIT_WAIT_S = 4.0
# From the fence to the latest exit of an `awa worker` process: the rest of the grace,
# the wait for cancelled handlers, the CLI's waits, and a second to spare.
FENCE_HOLD_S = GRACE_S + ABANDON_WAIT_S + CLI_EXIT_WAIT_S + 1.0


async def shut_down(worker: Worker, timeout_ms: int) -> list[Attempt]:
    """Shut ``worker`` down; returns the attempts whose handlers were abandoned."""
    deadline = time.monotonic() + timeout_ms / 1000
    await worker.idle_prober.stop()
    await asyncio.gather(*(d.stop() for d in worker.dispatchers.values()))
    await worker.claim_lane.close(worker.pool)
    await worker.seater.stop()  # its free seats released; a job handed over later goes back
    await worker.leader.stop()
    await worker.executor.wait_idle(max(0.0, deadline - time.monotonic()))
    grace_end = max(deadline, time.monotonic()) + GRACE_S
    await _within(grace_end, "write queued outcomes", worker.completer.drain())
    fenced_ids: set[int] = set()
    unfinished = list(worker.executor.attempts.values())
    fenced = await _within(
        grace_end, "fence unfinished jobs", _fence(worker, unfinished, fenced_ids)
    )
    abandoned = await worker.executor.abandon(ABANDON_WAIT_S)
    stopped = [a for a in unfinished if a.key[0] in fenced_ids and a not in abandoned]
    await _within(grace_end, "release stopped jobs", _release(worker, stopped))
    await worker.executor.stop()
    await worker.completer.stop()
    await worker.heartbeat.stop()
    await worker.control_service.stop()
    await worker.upkeep.stop()
    await worker.publisher.stop()
    await worker.listener.stop()
    await _within(grace_end, "deregister", _deregister(worker))
    worker.executor.close()
    if abandoned:
        _report(abandoned, fenced_ids if fenced else None)
    return abandoned


async def _within(end: float, step: str, work: Awaitable[None]) -> bool:
    """Run one step of the grace; False when it failed or ran out of time."""
    try:
        async with asyncio.timeout(max(0.0, end - time.monotonic())):
            await work
        return True
    except TimeoutError:
        logger.warning("shutdown: gave up on %s (grace of %.0f s used up)", step, GRACE_S)
    except Exception as exc:
        logger.warning("shutdown: could not %s: %s", step, exc)
    return False


async def _fence(worker: Worker, unfinished: list[Attempt], fenced_ids: set[int]) -> None:
    """Return the attempts still running to retryable (lease-guarded), held for
    ``FENCE_HOLD_S``, after writing what they recorded since the last heartbeat: the
    next attempt resumes from the checkpoint, as after any retry."""
    if not unfinished:
        return
    for attempt in unfinished:
        attempt.request_cancel("shutdown")
    try:  # best effort: the fence below matters more than the checkpoints
        await progress.write_waiting(worker.pool, unfinished)
    except Exception as exc:
        logger.warning("shutdown: could not write the progress of unfinished handlers: %s", exc)
    params = {
        "ids": [a.key[0] for a in unfinished],
        "run_leases": [a.key[1] for a in unfinished],
        "attempted_ats": [a.key[2] for a in unfinished],
        "reason": "worker shut down before the handler finished",
    }
    async with worker.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(sql.JOB_FENCE_ATTEMPTS, params)
        ids = [row[0] for row in await cur.fetchall()]
        await conn.execute(sql.JOB_FENCE_HOLD, {"ids": ids, "hold_s": FENCE_HOLD_S})
    fenced_ids.update(ids)


async def _release(worker: Worker, stopped: list[Attempt]) -> None:
    """The fenced jobs whose handlers ended after their cancellation: claimable now."""
    if not stopped:
        return
    params = {"ids": [a.key[0] for a in stopped], "run_leases": [a.key[1] for a in stopped]}
    async with worker.pool.connection() as conn:
        await conn.execute(sql.JOB_FENCE_RELEASE, params)


async def _deregister(worker: Worker) -> None:
    async with worker.pool.connection() as conn:
        await conn.execute(sql.RUNTIME_INSTANCE_DELETE, {"instance_id": worker.instance_id})


def _report(abandoned: list[Attempt], fenced_ids: set[int] | None) -> None:
    """``fenced_ids``: the jobs the fence returned to retryable (None: the fence failed).
    An abandoned handler whose row had already moved on (an operator's cancel, a rescue)
    was not returned by this worker, and is not said to be."""
    names = ", ".join(a.describe() for a in abandoned)
    if fenced_ids is None:
        fate = "the rescuer returns their jobs once their heartbeats are stale"
    elif all(a.job.id in fenced_ids for a in abandoned):
        fate = "their jobs were returned to retryable"
    else:
        moved_on = ", ".join(str(a.job.id) for a in abandoned if a.job.id not in fenced_ids)
        fate = (
            "their jobs were returned to retryable, except those no longer running here "
            f"(cancelled, rescued or finished meanwhile): {moved_on}"
        )
    logger.warning(
        "shutdown: abandoned %d handler(s) still running: %s; %s",
        len(abandoned), names, fate,
        extra={"event": "handlers_abandoned", "job_ids": [a.job.id for a in abandoned]},
    )  # fmt: skip
