"""Stand-ins for the worker's parts around an Executor, for unit tests of it."""

from __future__ import annotations

from awa.worker import results


class FakePermit:
    """Counts its releases (an attempt must release its permit exactly once)."""

    def __init__(self) -> None:
        self.released = 0

    def release(self) -> None:
        self.released += 1


class FakeCompleter:
    """Keeps the outcomes submitted to it."""

    def __init__(self) -> None:
        self.outcomes: list[results.Finalization] = []

    async def submit(self, outcome: results.Finalization) -> None:
        self.outcomes.append(outcome)

    def attempts(self) -> list[results.AttemptKey]:
        return []
