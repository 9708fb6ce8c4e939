"""Browser fixtures: headless Chromium (selenium + chromedriver), a database with a live
worker and seeded jobs, and ``awa serve`` subprocesses on free loopback ports.

Chromium and chromedriver come from Debian (``chromium``, ``chromium-driver``); ``make
test`` installs them where it can (``.ci/system-deps``). Without them every test here is
skipped with that reason.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from tests.acceptance.support import LIVE_SETTINGS, start_serve, stop_serve
from tests.conftest import PgServer
from tests.helpers import wait_until

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROME_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--window-size=1360,860",
)  # fmt: skip


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session (cookies are cleared per test)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    chromium = _find(CHROMIUM_NAMES)
    driver_path = _find(("chromedriver",))
    if chromium is None or driver_path is None:
        pytest.skip(
            "chromium/chromedriver not found and `make test` could not install them: "
            "apt-get install -y chromium chromium-driver"
        )
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    profile = tempfile.mkdtemp(prefix="awa-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(options=options, service=Service(driver_path))
    except Exception as exc:  # a broken install should say why, not fail every test
        shutil.rmtree(profile, ignore_errors=True)
        pytest.skip(f"headless Chromium did not start: {exc}")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser_db(pg_server: PgServer, template_db: str) -> Iterator[str]:
    """A migrated database shared by the tests of one module."""
    name = f"awa_browser_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}" STRATEGY FILE_COPY')
    yield pg_server.url_for(name)
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclasses.dataclass
class SendEmail:
    to: str


@dataclasses.dataclass
class BuildReport:
    report_id: int


@dataclasses.dataclass
class Seeded:
    """The worker and the jobs the browser tests look at."""

    client: awa.Client
    failed_id: int
    parked_id: int


@pytest.fixture(scope="module")
def seeded(browser_db: str) -> Iterator[Seeded]:
    """A weighted worker on ``email`` (rate limited) and ``reports``, some completed jobs,
    one failed with an error, and a scheduled job on ``parked``, a queue no worker runs."""
    client = awa.Client(browser_db)

    @client.task(SendEmail, queue="email")
    def send_email(job: awa.Job[SendEmail]) -> None:
        time.sleep(0.01)
        if job.args.to.startswith("bounce"):
            raise awa.TerminalError(f"mailbox {job.args.to} does not exist")

    @client.task(BuildReport, queue="reports")
    def build_report(job: awa.Job[BuildReport]) -> None:
        time.sleep(0.02)

    client.insert_many([SendEmail(f"user{i}@example.com") for i in range(40)])
    failed = client.insert(SendEmail("bounce@example.com"), tags=["newsletter"])
    client.insert_many([BuildReport(i) for i in range(20)])
    parked = client.insert(
        {"note": "waits for an operator"}, kind="archive", queue="parked",
        run_at=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    client.start(
        [
            awa.QueueConfig("email", min_workers=2, weight=2, rate_limit=(100, 0)),
            awa.QueueConfig("reports", min_workers=1, weight=1),
        ],
        global_max_workers=6,
        **LIVE_SETTINGS,
    )
    try:
        wait_until(lambda: client.get_job(failed.id).state == awa.JobState.FAILED)
        wait_until(lambda: client.list_runtime_instances())
        yield Seeded(client, failed.id, parked.id)
    finally:
        client.shutdown()
        client.close()


Serve = Callable[..., str]


@pytest.fixture(scope="module")
def serve(browser_db: str, seeded: Seeded) -> Iterator[Serve]:
    """Start ``awa serve`` with extra arguments; returns its base URL. Stopped at the end."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, **env: str) -> str:
        proc, base = start_serve(
            browser_db, "--refresh-ms", "500", "--sample-interval-ms", "500", *args, **env
        )
        procs.append(proc)
        return base

    yield start
    for proc in procs:
        stop_serve(proc)
