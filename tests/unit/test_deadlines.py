"""The single deadline watcher expires exactly the attempts whose time has come."""

from __future__ import annotations

import time
from dataclasses import dataclass

from awa.worker.deadlines import Deadlined, DeadlineWatch
from tests.helpers import wait_for


@dataclass
class FakeAttempt:
    due: float | None
    cancel_reason: str | None = None


async def test_expires_due_attempts_and_wakes_for_an_earlier_newcomer() -> None:
    expired: list[Deadlined] = []

    def expire(attempt: Deadlined) -> None:
        attempt.cancel_reason = "deadline"
        expired.append(attempt)

    now = time.monotonic()
    far = FakeAttempt(now + 3600)
    never = FakeAttempt(None)
    attempts: dict[int, Deadlined] = {1: far, 2: never}
    watch = DeadlineWatch(attempts.values, expire)
    watch.start()
    try:
        soon = FakeAttempt(time.monotonic() + 0.05)
        attempts[3] = soon
        watch.noticed(soon.due or 0)  # earlier than anything known: look again

        async def soon_expired() -> bool:
            return soon in expired

        await wait_for(soon_expired, timeout=5)
        assert expired == [soon] and far.cancel_reason is None and never.cancel_reason is None
    finally:
        await watch.stop()
