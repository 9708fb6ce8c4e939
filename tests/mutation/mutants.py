"""Hand-written mutants of the permit pool, the control state and the dispatcher, each
with the tests that must kill it. ``python -m tests.mutation.run`` (``make mutate``)
applies them one at a time to a copy of ``src/`` and reports the survivors.

A mutant is one small, plausible slip — a wrong comparison, a forgotten wake-up, a
setting read from the wrong place — that the suite should notice. Survivors mean a rule
the tests only appear to check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """Replace ``old`` by ``new`` (exactly once) in ``path`` under src/awa/."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


UNIT = ("tests/unit/test_permits.py", "tests/unit/test_overflow_pool_stateful.py")
CONTROL = ("tests/unit/test_queue_control.py",)
OVERRIDES = ("tests/integration/test_overrides.py",)
WEIGHTED = ("tests/integration/test_weighted.py",)
LIVE = ("tests/integration/test_live_concurrency.py",)

MUTANTS = (
    # -- permits (design record 011, ADR 0005) ------------------------------------------
    Mutant(
        "fair share rounds down",
        "worker/permits.py",
        "return math.ceil(pool * self._weights[queue] / weight)",
        "return math.floor(pool * self._weights[queue] / weight)",
        UNIT,
    ),
    Mutant(
        "grant ignores the fair share",
        "worker/permits.py",
        "granted = min(wanted, self.available, self.fair_share(queue) - self._held[queue])",
        "granted = min(wanted, self.available)",
        UNIT + WEIGHTED,
    ),
    Mutant(
        "a short claim keeps its demand (ADR 0005 departure 1)",
        "worker/dispatcher.py",
        "            self.permits.clear_demand()\n        if not jobs:",
        "            pass\n        if not jobs:",
        WEIGHTED,
    ),
    Mutant(
        "a release wakes nobody else",
        "worker/permits.py",
        "        if self._wake_others and self.available > 0:",
        "        if False:",
        UNIT + WEIGHTED,
    ),
    Mutant(
        "local permits are not clamped after a shrink",
        "worker/permits.py",
        "local = min(wanted, max(0, self.local_capacity - self._local_used))",
        "local = min(wanted, self.local_capacity - self._local_used)",
        UNIT + LIVE,
    ),
    Mutant(
        "growing permits wakes nobody",
        "worker/permits.py",
        "        if grew and self._wake is not None:\n            self._wake()",
        "        if False:\n            pass",
        UNIT,
    ),
    # -- control (design record 038) ----------------------------------------------------
    Mutant(
        "the poll-interval override is only reported",
        "worker/dispatcher.py",
        "        timeout = self.control.poll_interval_ms / 1000",
        "        timeout = self.control.config.poll_interval_ms / 1000",
        OVERRIDES,
    ),
    Mutant(
        "the idle prober ignores the poll-interval override",
        "worker/idle_probe.py",
        "dispatcher.probe_due = now + dispatcher.control.poll_interval_ms / 1000",
        "dispatcher.probe_due = now + dispatcher.control.config.poll_interval_ms / 1000",
        OVERRIDES,
    ),
    Mutant(
        "the claim batch override is only reported",
        "worker/dispatcher.py",
        "        wanted = self._args_budget.claimable(control.claim_batch_size)",
        "        wanted = self._args_budget.claimable(control.config.claim_batch_size)",
        OVERRIDES,
    ),
    Mutant(
        "a rate override does not retune the bucket",
        "worker/control.py",
        "            self.bucket.reconfigure(rate, burst)",
        "            pass",
        CONTROL + OVERRIDES,
    ),
    Mutant(
        "the deadline guard rail is gone",
        "worker/control.py",
        "        if (override == 0) != (configured == 0):",
        "        if False:",
        CONTROL + OVERRIDES,
    ),
    Mutant(
        "a refusal is never logged again after a clear",
        "worker/control.py",
        "        self._warned = {k: v for k, v in self._warned.items() if k in ignored}",
        "        pass",
        CONTROL,
    ),
    Mutant(
        "a control change does not wake the dispatcher",
        "worker/runtime.py",
        "        self._resize_permits(queue, control)\n        self.dispatchers[queue].wake()",
        "        self._resize_permits(queue, control)",
        OVERRIDES + LIVE,
    ),
    Mutant(
        "the control row is read on the poll interval, not per cadence",
        "worker/runtime.py",
        '"control-refresh", config.override_refresh_ms / 1000,',
        '"control-refresh", config.poll_interval_ms / 1000,',
        OVERRIDES,
    ),
    Mutant(
        "a notice does not trigger a refresh",
        "worker/runtime.py",
        "            self.control_service.kick()",
        "            pass",
        OVERRIDES + LIVE,
    ),
    Mutant(
        "Σ min_workers over the global pool is not refused",
        "worker/control.py",
        "    if total <= global_max_workers:\n        return None",
        "    if True:\n        return None",
        CONTROL + LIVE,
    ),
    Mutant(
        "shrinking the overflow pool is forgotten",
        "worker/runtime.py",
        "        permits.pool.resize(self.config.global_max_workers - minimums)",
        "        pass",
        LIVE,
    ),
)
