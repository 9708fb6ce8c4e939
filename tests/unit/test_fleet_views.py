"""The dashboard's fleet wording and the pool page's shares, from hand-made values."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import awa
from awa.dashboard.views import fleet_brief, fleet_seen_text, limits_text

AT = datetime(2026, 12, 1, tzinfo=UTC)
CAP = awa.QueueLimits("sync", 2, 20.0, 40, "tenant", AT)


def _pool(total: int, **members: tuple[int, int]) -> awa.FleetPool:
    return awa.FleetPool(total, {q: awa.PoolMember(*m) for q, m in members.items()}, AT)


@pytest.mark.parametrize(
    ("pool", "shares"),
    [
        (_pool(6, email=(1, 3), reports=(1, 1)), {"email": 4, "reports": 2}),
        (_pool(12, email=(4, 3), reports=(0, 1)), {"email": 10, "reports": 2}),
        (_pool(10, a=(0, 1), b=(0, 1), c=(0, 1)), {"a": 4, "b": 3, "c": 3}),  # sums to 10
        (_pool(2, qa=(0, 1), qb=(0, 4)), {"qa": 1, "qb": 1}),  # one each first: none starves
        (_pool(20, a=(0, 3), b=(0, 1), c=(0, 2)), {"a": 9, "b": 4, "c": 7}),  # within one
        (_pool(3, a=(2, 1), b=(1, 5)), {"a": 2, "b": 1}),  # minimums take it all
    ],
)
def test_shares_when_every_member_is_busy(pool: awa.FleetPool, shares: dict[str, int]) -> None:
    assert pool.busy_shares() == shares


def test_limits_and_a_workers_view_in_words() -> None:
    assert limits_text(CAP) == "cap 2 · 20/s (burst 40) · per tenant"
    assert limits_text(awa.QueueLimits("q", None, 0.5, None, None, AT)) == "0.5/s"
    held = awa.QueueFleet(CAP, None, None, running=5, blocked="partition", holds=1)
    assert fleet_seen_text(held, CAP) == (
        "applies the stored limits · fleet running 5 at its last refresh · "
        "last claim held back by partition · 1 hold"
    )
    newer = awa.QueueLimits("sync", 3, 20.0, 40, "tenant", AT.replace(hour=1))
    assert fleet_seen_text(held, newer).startswith("has not read the stored limits yet · ")
    assert fleet_seen_text(held, None).startswith("has not read the stored limits yet · ")
    member = awa.QueueFleet(None, awa.PoolMember(1, 3), 6, running=4, holds=0)
    assert fleet_seen_text(member, None) == (
        "in the fleet pool · fleet running 4 at its last refresh · last claim not held back · "
        "0 holds"
    )
    assert fleet_seen_text(None, CAP) == "has not read the fleet's limits on this queue yet"
    assert fleet_brief(held) == (
        "cap 2 · 20/s (burst 40) · per tenant · fleet running 5 · held back by partition"
    )
    assert fleet_brief(member) == "pool min 1 · weight 3 of 6 · fleet running 4"
    assert fleet_brief(None) == "-"
