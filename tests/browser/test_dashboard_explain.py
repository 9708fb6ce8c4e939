"""The explain panel in a real browser: on a waiting job, on a running job, and the queue
page's line about its oldest waiting job.

``AWA_SCREENSHOTS=docs/screenshots`` (re)writes job-explain-waiting.png,
job-explain-running.png and queue-explain.png.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import awa
from tests.acceptance.support import LIVE_SETTINGS, start_serve, stop_serve
from tests.helpers import wait_until

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By

from tests.browser.test_dashboard import open_page, screenshot, text_of, wait


@dataclasses.dataclass
class ImportFile:
    path: str
    slow: bool = True


@dataclasses.dataclass
class Scene:
    """Two imports running (held on ``gate``), four waiting behind them."""

    running_id: int
    oldest_waiting_id: int
    last_waiting_id: int


@pytest.fixture(scope="module")
def scene(browser_db: str) -> Iterator[Scene]:
    client = awa.Client(browser_db)
    gate = threading.Event()

    @client.task(ImportFile, queue="imports")
    def import_file(job: awa.Job[ImportFile]) -> None:
        if job.args.slow:
            job.set_progress(35, f"reading {job.args.path}")
            job.flush_progress_sync()
            gate.wait(120)

    client.start([("imports", 2)], **LIVE_SETTINGS)
    try:
        # Some finished imports first: the wait estimate needs a completion rate.
        quick = client.insert_many([ImportFile(f"/srv/q{i}.csv", slow=False) for i in range(12)])
        wait_until(lambda: all(client.get_job(j.id).state.is_final for j in quick))
        running = client.insert_many([ImportFile("/srv/big-1.csv"), ImportFile("/srv/big-2.csv")])
        waiting = client.insert_many([ImportFile(f"/srv/w{i}.csv") for i in range(4)])
        wait_until(lambda: client.get_job(running[1].id).state is awa.JobState.RUNNING)
        yield Scene(running[0].id, waiting[0].id, waiting[-1].id)
    finally:
        gate.set()
        client.shutdown()
        client.close()


@pytest.fixture(scope="module")
def site(browser_db: str, scene: Scene) -> Iterator[str]:
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


def reason(driver: Any, code: str) -> str:
    return text_of(driver, f"#explain-reasons li[data-code='{code}']")


def test_waiting_job_shows_why(driver: Any, site: str, scene: Scene) -> None:
    open_page(driver, f"{site}jobs/{scene.last_waiting_id}")
    wait(driver).until(
        lambda d: (
            "all 2 permits for queue 'imports' are in use"
            in d.find_element(By.ID, "explain-summary").text
        )
    )
    assert text_of(driver, "#explain-summary").startswith(
        f"Job {scene.last_waiting_id} (import_file) has waited "
    )
    busy = reason(driver, "workers_busy")
    assert "counts 2 running jobs of the queue against 2 permits" in busy
    assert "holds 2 of 2" in busy
    behind = reason(driver, "queued_behind")
    assert "3 jobs of queue 'imports' are ahead of it in claim order" in behind
    # The rate over the time its completions took (the scene's 12 finished just now).
    assert re.search(r"recent completion rate of \S+/s \(last [^)]+\) they take about", behind)
    screenshot(driver, "job-explain-waiting")


def test_running_job_shows_where_and_progress(driver: Any, site: str, scene: Scene) -> None:
    open_page(driver, f"{site}jobs/{scene.running_id}")
    summary = text_of(driver, "#explain-summary")
    assert summary.startswith(f"Job {scene.running_id} (import_file) is running on ")
    running = reason(driver, "running")
    assert "attempt 1 of 25" in running and "last heartbeat" in running
    assert "Progress 35% (reading /srv/big-1.csv)." in running
    screenshot(driver, "job-explain-running")


def test_queue_page_says_why_its_oldest_job_waits(driver: Any, site: str, scene: Scene) -> None:
    open_page(driver, f"{site}queues/imports")
    line = text_of(driver, "#queue-explain")
    assert line.startswith("OLDEST WAITING JOB") or line.lower().startswith("oldest waiting job")
    assert f"Job {scene.oldest_waiting_id} (import_file) has waited " in line
    assert "all 2 permits for queue 'imports' are in use" in line
    link = driver.find_element(By.CSS_SELECTOR, "#queue-explain a")
    assert (link.get_attribute("href") or "").endswith(f"/jobs/{scene.oldest_waiting_id}")
    screenshot(driver, "queue-explain")
