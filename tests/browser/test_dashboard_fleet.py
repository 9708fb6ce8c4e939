"""Fleet limits and the fleet pool in a real browser, against a live worker held at them.

``AWA_SCREENSHOTS=docs/screenshots`` (re)writes queue-limits.png and pool.png.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import awa
from tests.acceptance.support import LIVE_SETTINGS, start_serve, stop_serve
from tests.helpers import wait_until

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By

from tests.browser.test_dashboard import click, confirm, open_page, screenshot, text_of, wait

TENANTS = {"acme": 6, "globex": 3, "initech": 1}


@dataclasses.dataclass
class SyncAccount:
    tenant: str


@dataclasses.dataclass
class Mail:
    n: int


@dataclasses.dataclass
class Report:
    n: int


@pytest.fixture(scope="module")
def scene(browser_db: str) -> Iterator[awa.Client]:
    """``sync`` capped at 2 per tenant (three tenants), and ``email``/``reports`` sharing
    a fleet pool of 6 (3:1 over minimums of 1); every handler waits on ``gate``, so the
    worker stays held at the limits while the pages are looked at. (How the pool's 6 split
    depends on which member asked first: running jobs are never taken back.)"""
    client = awa.Client(browser_db)
    gate = threading.Event()

    @client.task(SyncAccount, queue="sync")
    def sync_account(job: awa.Job[SyncAccount]) -> None:
        gate.wait(120)

    @client.task(Mail, queue="email")
    def send(job: awa.Job[Mail]) -> None:
        gate.wait(120)

    @client.task(Report, queue="reports")
    def build(job: awa.Job[Report]) -> None:
        gate.wait(120)

    client.set_queue_limits("sync", concurrency=2, rate_limit=20.0, partition_by="tenant")
    client.set_fleet_pool(
        6, {"email": awa.PoolMember(min_workers=1, weight=3), "reports": awa.PoolMember(1, 1)}
    )
    client.insert_many([SyncAccount(t) for t, n in TENANTS.items() for _ in range(n)])
    client.insert_many([Mail(i) for i in range(12)])
    client.insert_many([Report(i) for i in range(8)])
    client.start([("sync", 8), ("email", 6), ("reports", 6)], **LIVE_SETTINGS)
    try:
        wait_until(lambda: _running(client)["sync"] == 5)  # acme 2, globex 2, initech 1
        wait_until(lambda: _running(client)["email"] + _running(client)["reports"] == 6)
        yield client
    finally:
        gate.set()
        client.shutdown()
        client.close()


def _running(client: awa.Client) -> dict[str, int]:
    return {s.queue: s.running for s in client.queue_stats()}


def _cap(client: awa.Client, queue: str) -> int | None:
    limits = client.queue_limits(queue)
    return None if limits is None else limits.concurrency


def _pool_total(client: awa.Client) -> int | None:
    pool = client.fleet_pool()
    return None if pool is None else pool.total


@pytest.fixture(scope="module")
def site(browser_db: str, scene: awa.Client) -> Iterator[str]:
    proc: subprocess.Popen[str]
    proc, base = start_serve(browser_db, "--refresh-ms", "500")
    try:
        yield base
    finally:
        stop_serve(proc)


@pytest.fixture
def driver(browser: Any) -> Any:
    # Leave the last page first: its live refresh, still in flight, would set a new CSRF
    # cookie after the next page has rendered its token.
    browser.get("about:blank")
    browser.delete_all_cookies()
    return browser


def fleet_rows(url: str) -> tuple[Any, ...]:
    """What an operator writes (not the claimers' own bookkeeping: buckets, asked_at)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(
            tuple(conn.execute(query).fetchall())
            for query in (
                "SELECT * FROM awa.queue_limits ORDER BY queue",
                "SELECT * FROM awa.fleet_pool",
                "SELECT queue, min_workers, weight FROM awa.fleet_pool_members ORDER BY queue",
            )
        )


def fill(driver: Any, values: dict[str, str]) -> None:
    for element_id, text in values.items():
        field = driver.find_element(By.ID, element_id)
        field.clear()
        if text:
            field.send_keys(text)


def test_queue_page_shows_and_changes_fleet_limits(
    driver: Any, site: str, scene: awa.Client
) -> None:
    open_page(driver, site + "queues/sync")
    assert text_of(driver, "#fleet-running") == "5 of 2 per key"
    assert text_of(driver, "#fleet-limits [data-limit='partition_by']") == "tenant"
    busiest = text_of(driver, "#busiest-partitions")
    assert "acme 2 running" in busiest and "globex 2 running" in busiest
    wait(driver).until(
        lambda d: "last claim held back by partition" in d.find_element(
            By.CSS_SELECTOR, ".fleet-seen").text
    )  # fmt: skip
    assert "applies the stored limits" in text_of(driver, ".fleet-seen")
    driver.execute_script(  # one step: a live refresh may replace the heading meanwhile
        "[...document.querySelectorAll('h2')].find(h => h.textContent === 'Fleet limits')"
        ".scrollIntoView()"
    )
    screenshot(driver, "queue-limits")

    # A refused value: the API's message in the page, nothing written.
    before = fleet_rows(scene.database_url)
    fill(driver, {"limit-rate_limit": "-3"})
    click(driver, "#save-limits")
    assert confirm(driver) == "Replace the fleet limits of sync?"
    assert "rate_limit" in text_of(driver, "#flash-error")
    assert fleet_rows(scene.database_url) == before

    # Raised to 3 per tenant: acme, with jobs waiting, gets its third at once.
    fill(driver, {"limit-concurrency": "3", "limit-rate_limit": "20"})
    click(driver, "#save-limits")
    confirm(driver)
    wait_until(lambda: _cap(scene, "sync") == 3)
    wait_until(lambda: _running(scene)["sync"] == 7)  # acme 3, globex 3, initech 1
    wait(driver).until(lambda d: d.find_element(By.ID, "fleet-running").text == "7 of 3 per key")
    assert "set fleet limits" in text_of(driver, "#audit-table")


def test_pool_page_shows_shares_and_changes_the_pool(
    driver: Any, site: str, scene: awa.Client
) -> None:
    open_page(driver, site + "pool")
    assert text_of(driver, "#pool-total-value") == "6"
    assert text_of(driver, "#pool-running") == "6"
    running = _running(scene)
    email = text_of(driver, "#pool-members tr[data-member='email']").split()
    reports = text_of(driver, "#pool-members tr[data-member='reports']").split()
    # queue, min, weight, running now, share when all busy, waiting
    assert email == ["email", "1", "3", str(running["email"]), "4", str(12 - running["email"])]
    assert reports == [
        "reports",
        "1",
        "1",
        str(running["reports"]),
        "2",
        str(8 - running["reports"]),
    ]
    screenshot(driver, "pool")
    open_page(driver, site)
    assert text_of(driver, "#pool-summary") == "fleet pool: 6 of 6 running"

    # Minimums over the total: the API's refusal, nothing written.
    open_page(driver, site + "pool")
    before = fleet_rows(scene.database_url)
    fill(driver, {"pool-total": "1"})
    click(driver, "#save-pool")
    assert confirm(driver) == "Replace the fleet pool?"
    assert "exceeds the pool total (1)" in text_of(driver, "#flash-error")
    assert fleet_rows(scene.database_url) == before

    # Grown to 8: both members have jobs waiting, so the fleet runs 8 of them at once.
    fill(driver, {"pool-total": "8"})
    click(driver, "#save-pool")
    confirm(driver)
    wait_until(lambda: _pool_total(scene) == 8)
    wait_until(lambda: _running(scene)["email"] + _running(scene)["reports"] == 8)
    wait(driver).until(lambda d: d.find_element(By.ID, "pool-running").text == "8")
    assert "set fleet pool" in text_of(driver, "#audit-table")
