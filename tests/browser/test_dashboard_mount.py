"""The dashboard mounted at a path of a FastAPI app served by uvicorn, in headless
Chromium: navigation, live refresh and an htmx action all stay under the mount point."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("selenium")

import uvicorn
from fastapi import FastAPI
from selenium.webdriver.common.by import By

from awa.contrib.starlette import mount_dashboard
from tests.browser.conftest import Seeded
from tests.browser.test_dashboard import click, confirm, open_page, text_of, wait
from tests.helpers import wait_until

PREFIX = "/ops/awa"


@pytest.fixture(scope="module")
def app_url(browser_db: str, seeded: Seeded) -> Iterator[str]:
    """A FastAPI app of its own with the dashboard mounted at PREFIX, on a free port."""
    app = FastAPI()

    @app.get("/")
    async def home() -> dict[str, str]:
        return {"app": "shop"}

    mount_dashboard(app, PREFIX, token=None, database_url=browser_db, refresh_ms=500)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # poll the server's own flag until it listens
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture
def driver(browser: Any) -> Any:
    # Leave the last page first: its live refresh, still in flight, would set a new CSRF
    # cookie after the next page has rendered its token.
    browser.get("about:blank")
    browser.delete_all_cookies()
    return browser


def test_navigation_and_actions_under_the_mount_point(
    driver: Any, app_url: str, seeded: Seeded
) -> None:
    open_page(driver, f"{app_url}{PREFIX}/")
    assert "reports" in text_of(driver, "#queues-table")
    click(driver, "nav a[href$='/jobs']")
    wait(driver).until(lambda d: d.current_url == f"{app_url}{PREFIX}/jobs")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Jobs"

    open_page(driver, f"{app_url}{PREFIX}/")
    click(driver, "button[data-action='pause'][data-queue='reports']")  # htmx, from PREFIX
    assert confirm(driver) == "Pause queue reports?"

    def paused() -> bool:
        return next(s for s in seeded.client.queue_stats() if s.queue == "reports").paused

    wait_until(paused)
    wait(driver).until(lambda d: d.current_url.startswith(f"{app_url}{PREFIX}/"))
    wait(driver).until(lambda d: "paused" in d.find_element(
        By.CSS_SELECTOR, "tr[data-queue='reports']").text)  # fmt: skip  # the live refresh
    click(driver, "button[data-action='resume'][data-queue='reports']")
    assert confirm(driver) == "Resume queue reports?"
    wait_until(lambda: not paused())
