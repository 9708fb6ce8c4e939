"""`awa queue limits` and `awa pool` (CONTRACT §6, §8, §9) as subprocesses."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import psycopg

import awa
from tests.acceptance.conftest import Awa


def _fleet_state(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(
            tuple(conn.execute(f"SELECT * FROM awa.{table} ORDER BY 1").fetchall())
            for table in ("queue_limits", "fleet_pool", "fleet_pool_members", "queue_meta")
        )


def test_limits_set_show_clear(awa_cli: Awa, sync_client: awa.Client) -> None:
    sync_client.insert_many([{"tenant": "a"}, {"tenant": "b"}], kind="k", queue="email")
    result = awa_cli(
        "queue", "limits", "set", "email", "--concurrency", "3", "--rate-limit", "2.5",
        "--partition-by", "tenant", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = result.json()
    keys = ("queue", "concurrency", "rate_limit", "burst", "partition_by")
    assert {k: body[k] for k in keys} == {
        "queue": "email", "concurrency": 3, "rate_limit": 2.5, "burst": None,
        "partition_by": "tenant",
    }  # fmt: skip
    assert body["running"] == 0 and body["top_partitions"] == []
    assert "refresh cadence" in result.stderr
    shown = awa_cli("queue", "limits", "show", "email").stdout
    assert "3 (default)" in shown  # the burst in force, ceil(2.5): "-" read as "none"
    stored = sync_client.queue_limits("email")
    assert stored is not None and (stored.concurrency, stored.partition_by) == (3, "tenant")

    # Whole state: a second set without --partition-by removes it.
    assert awa_cli("queue", "limits", "set", "email", "--concurrency", "5").returncode == 0
    stored = sync_client.queue_limits("email")
    assert stored is not None
    assert (stored.concurrency, stored.rate_limit, stored.partition_by) == (5, None, None)

    everything = awa_cli("queue", "limits", "show", "--json").json()
    assert [e["queue"] for e in everything] == ["email"]
    table = awa_cli("queue", "limits", "show")
    assert table.returncode == 0 and "email" in table.stdout

    cleared = awa_cli("queue", "limits", "clear", "email", "--json")
    assert cleared.returncode == 0
    assert cleared.json() == {"queue": "email", "limits": None}
    assert sync_client.queue_limits("email") is None
    assert "no queue has fleet limits" in awa_cli("queue", "limits", "show").stdout
    awa_cli("queue", "limits", "set", "reports", "--concurrency", "2")
    # A queue named: about that queue, though another has limits.
    named = awa_cli("queue", "limits", "show", "email").stdout
    assert "queue email has no fleet limits" in named and "reports" not in named


def test_pool_set_show_clear(awa_cli: Awa, sync_client: awa.Client) -> None:
    result = awa_cli(
        "pool", "set", "--total", "12", "--queue", "email:min=4,weight=3", "--queue", "reports",
        "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.json()["queues"] == {
        "email": {"min_workers": 4, "weight": 3, "running": 0},
        "reports": {"min_workers": 0, "weight": 1, "running": 0},
    }
    pool = sync_client.fleet_pool()
    assert pool is not None and pool.total == 12
    assert pool.queues == {"email": awa.PoolMember(4, 3), "reports": awa.PoolMember(0, 1)}
    # Whole state: a member not named again leaves the pool.
    assert awa_cli("pool", "set", "--total", "8", "--queue", "reports:weight=2").returncode == 0
    pool = sync_client.fleet_pool()
    assert pool is not None and pool.queues == {"reports": awa.PoolMember(0, 2)}
    shown = awa_cli("pool", "show")
    assert shown.returncode == 0 and "0 of 8 running" in shown.stdout
    assert awa_cli("pool", "clear").returncode == 0
    assert sync_client.fleet_pool() is None
    assert awa_cli("pool", "show", "--json").json() is None


BAD_INPUT = [
    (["queue", "limits", "set", "email", "--concurrency", "0"], "--concurrency"),
    (["queue", "limits", "set", "email", "--concurrency", "x"], "--concurrency"),
    (["queue", "limits", "set", "email", "--rate-limit", "0"], "--rate-limit"),
    (["queue", "limits", "set", "email", "--rate-limit", "1e308"], "--rate-limit"),
    (["queue", "limits", "set", "email", "--rate-limit", "nan"], "--rate-limit"),
    (["queue", "limits", "set", "email", "--rate-limit", "1", "--burst", "0"], "--burst"),
    (["queue", "limits", "set", "email", "--concurrency", "1", "--burst", "3"], "--burst"),
    (["queue", "limits", "set", "email", "--burst", "3"], "--burst"),
    (["queue", "limits", "set", "email", "--partition-by", "  "], "--partition-by"),
    (["queue", "limits", "set", "email", "--partition-by", ""], "--partition-by"),
    (["queue", "limits", "set", "email", "--partition-by", "k" * 64], "--partition-by"),
    (["queue", "limits", "set", "email"], "--concurrency"),
    (["queue", "limits", "set", "", "--concurrency", "1"], "argument QUEUE"),
    (["pool", "set", "--total", "0", "--queue", "a"], "--total"),
    (["pool", "set", "--total", "3"], "--queue"),
    (["pool", "set", "--total", "3", "--queue", "a:min=4"], "--queue"),
    (["pool", "set", "--total", "3", "--queue", "a:weight=0"], "--queue"),
    (["pool", "set", "--total", "3", "--queue", "a:size=2"], "--queue"),
    (["pool", "set", "--total", "3", "--queue", "a", "--queue", "a"], "--queue"),
]


def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    awa_cli: Awa, sync_client: awa.Client, database_url: str
) -> None:
    sync_client.set_queue_limits("email", concurrency=2)
    sync_client.set_fleet_pool(4, {"a": awa.PoolMember(1, 1)})
    before = _fleet_state(database_url)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:  # 2 cores
        results = list(pool.map(lambda case: awa_cli(*case[0]), BAD_INPUT))
    for (args, flag), result in zip(BAD_INPUT, results, strict=True):
        case = " ".join(args)
        assert result.returncode == 2, (case, result.stdout, result.stderr)
        assert len(result.stderr_lines) == 1, (case, result.stderr)
        assert flag in result.stderr_lines[0], (case, result.stderr)
        assert result.stdout == "", case
    assert _fleet_state(database_url) == before
