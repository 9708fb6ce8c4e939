"""Batch operations in the dashboard, in a real browser: preview, apply (confirmed), follow
the progress, cancel; bad input shows a message and writes nothing.

``AWA_SCREENSHOTS=docs/screenshots`` (re)writes batches.png.
"""

from __future__ import annotations

import subprocess
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import awa
from tests.acceptance.support import start_serve, stop_serve
from tests.helpers import wait_until

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By

from tests.browser.test_dashboard import click, confirm, open_page, screenshot, text_of, wait


@pytest.fixture(scope="module")
def client(browser_db: str) -> Iterator[awa.Client]:
    with awa.Client(browser_db) as c:
        yield c


@pytest.fixture(scope="module")
def site(browser_db: str) -> Iterator[str]:
    proc: subprocess.Popen[str]
    proc, base = start_serve(browser_db, "--refresh-ms", "300")
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


def test_preview_then_apply_moves_the_jobs(driver: Any, site: str, client: awa.Client) -> None:
    jobs = client.insert_many([{"n": i} for i in range(30)], kind="newsletter", queue="email")
    other = client.insert({"n": 99}, kind="receipt", queue="email")
    query = urllib.parse.urlencode({"op": "move_queue", "to": "email-slow", "kind": "newsletter"})
    open_page(driver, f"{site}batches?{query}")
    assert text_of(driver, "#preview-total") == "30"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#preview-sample tbody tr")) == 10
    assert {client.get_job(j.id).queue for j in jobs} == {"email"}  # the preview changed nothing

    driver.find_element(By.ID, "batch-chunk").clear()
    driver.find_element(By.ID, "batch-chunk").send_keys("7")
    earlier = {b.id for b in client.list_batches()}  # the module's database is shared
    click(driver, "#apply-batch")
    assert confirm(driver) == "Apply 'move to queue email-slow' to 30 job(s)?"
    wait_until(lambda: {client.get_job(j.id).queue for j in jobs} == {"email-slow"})
    assert client.get_job(other.id).queue == "email"
    (op,) = [b for b in client.list_batches() if b.id not in earlier]
    assert (op.op, op.total, op.chunk_size) == ("move_queue", 30, 7)
    wait_until(lambda: client.get_batch(op.id).state == "completed")
    row = f"#batches-table tr[data-batch='{op.id}']"
    wait(driver).until(lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute(
        "data-state") == "completed")  # fmt: skip
    assert "100%" in text_of(driver, row)
    screenshot(driver, "batches")


def test_cancel_an_operation_from_the_list(driver: Any, site: str, client: awa.Client) -> None:
    client.insert_many([{"n": i} for i in range(5)], kind="report", queue="reports")
    # Submitted but not run: nobody carries it out (no worker), so it stays open.
    op = client.apply_batch(awa.SetPriority(1), queue="reports", wait=False)
    open_page(driver, f"{site}batches")
    click(driver, f"tr[data-batch='{op.id}'] [data-action='cancel-batch']")
    assert confirm(driver) == f"Cancel batch operation {op.id}?"
    wait_until(lambda: client.get_batch(op.id).state == "cancelled")
    assert {j.priority for j in client.list_jobs(queue="reports")} == {2}  # nothing changed
    open_page(driver, f"{site}audit")
    assert "cancel batch" in text_of(driver, "#audit-table")


def test_bad_preview_says_why(driver: Any, site: str, client: awa.Client) -> None:
    open_page(driver, f"{site}batches?op=set_priority&priority=9&queue=x")
    assert "priority" in text_of(driver, "#batch-error")
    open_page(driver, f"{site}batches?op=move_queue&to=q&state=running")
    assert "state" in text_of(driver, "#batch-error")
    assert driver.find_elements(By.ID, "apply-batch") == []
