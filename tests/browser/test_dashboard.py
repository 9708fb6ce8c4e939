"""The dashboard in a real browser: headless Chromium against ``awa serve`` and a live worker.

Set ``AWA_SCREENSHOTS=docs/screenshots`` to (re)write the README screenshots while the
tests run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa
from tests.acceptance.support import ROOT, http, http_response
from tests.browser.conftest import BuildReport, Seeded, SendEmail, Serve
from tests.helpers import wait_until

pytest.importorskip("selenium")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = 15
SCREENSHOTS = os.environ.get("AWA_SCREENSHOTS")


class _Wait(WebDriverWait[Any]):
    """Also shrugs off an element detached between its lookup and its read: ChromeDriver
    then answers "unknown error: ... Node with given id does not belong to the document"
    rather than a stale element (a CI run, under load)."""

    def until(self, method: Any, message: str = "") -> Any:
        def tolerant(driver: Any) -> Any:
            try:
                return method(driver)
            except WebDriverException as exc:
                if "does not belong to the document" in str(exc):
                    return False
                raise

        return super().until(tolerant, message)


def wait(driver: Any) -> WebDriverWait[Any]:
    """An explicit wait that shrugs off elements replaced by a live refresh."""
    return _Wait(driver, WAIT_S, ignored_exceptions=[StaleElementReferenceException])


def text_of(driver: Any, css: str) -> str:
    return str(wait(driver).until(lambda d: d.find_element(By.CSS_SELECTOR, css).text))


# Finds the element and clicks it in one task of the page, so a live refresh cannot swap it
# out in between (a WebDriver click is several round trips: on a loaded machine a section
# refreshed every 300 ms was replaced before every attempt). The click runs in a later task
# so that a confirm() it opens does not block this script.
_CLICK = """
const css = arguments[0];
const el = document.querySelector(css);
if (el === null || el.disabled || el.getClientRects().length === 0) return false;
setTimeout(() => { const now = document.querySelector(css); if (now) now.click(); });
return true;
"""


def wait_complete(driver: Any) -> None:
    """Wait until the page is complete: htmx's deferred script has taken it over by then (a
    form clicked before that submits natively and its action is lost)."""
    wait(driver).until(lambda d: d.execute_script("return document.readyState") == "complete")


def click(driver: Any, css: str) -> None:
    """Click the visible, enabled element ``css`` once it is there and the page complete."""
    wait_complete(driver)
    wait(driver).until(lambda d: d.execute_script(_CLICK, css))


def confirm(driver: Any) -> str:
    """Accept the hx-confirm dialog; returns its question."""
    alert = wait(driver).until(ec.alert_is_present())
    question = str(alert.text)
    alert.accept()
    return question


def open_page(driver: Any, url: str) -> None:
    driver.get(url)
    wait_complete(driver)


def screenshot(driver: Any, name: str) -> None:
    if SCREENSHOTS:
        target = Path(SCREENSHOTS)
        target = target if target.is_absolute() else ROOT / target
        target.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(target / f"{name}.png"))


@pytest.fixture
def driver(browser: Any) -> Any:
    # Leave the last page first: its live refresh, still in flight, would set a new CSRF
    # cookie after the next page has rendered its token.
    browser.get("about:blank")
    browser.delete_all_cookies()
    return browser


@pytest.fixture(scope="module")
def base(serve: Serve) -> str:
    return serve()


def set_operator(driver: Any, base: str, name: str) -> None:
    open_page(driver, base)
    field = driver.find_element(By.ID, "operator")
    field.clear()
    field.send_keys(name)
    click(driver, "#operator-form button")
    # Wait for the server's answer, the cookie: the field holds the typed name at once,
    # and leaving the page before the answer came loses the name (CI: an action recorded
    # as 'anonymous').
    wait(driver).until(lambda d: any(
        c["name"].startswith("awa_operator_") and c["value"] == name for c in d.get_cookies()
    ))  # fmt: skip
    # Read in one page task: the form is re-rendered after it submits, and an element
    # found first may be gone when its value is asked for.
    wait(driver).until(
        lambda d: d.execute_script("return document.getElementById('operator')?.value") == name
    )


def _busy(driver: Any) -> bool:
    cells = driver.find_elements(By.CSS_SELECTOR, "tr[data-queue='email'] td")
    return len(cells) > 5 and cells[1].text not in ("", "0") and cells[5].text not in ("-", "0.0")


def test_every_page_loads_and_refreshes(driver: Any, base: str, seeded: Seeded) -> None:
    if SCREENSHOTS:  # pictures of a busy system: jobs flowing while the charts sample
        seeded.client.insert_many([SendEmail(f"bulk{i}@example.com") for i in range(800)])
        seeded.client.insert_many([BuildReport(i) for i in range(150)])
    open_page(driver, base)
    assert driver.title.startswith("queues")
    wait(driver).until(lambda d: "1 live worker" in d.find_element(By.ID, "worker-count").text)
    row = text_of(driver, "tr[data-queue='email']")
    assert "weighted" in row and "min 2" in row and "weight 2" in row
    assert "parked" in text_of(driver, "#queues-table")
    # The live part is replaced by polling: wait for a fresh copy of the table.
    old = driver.find_element(By.ID, "queues-table")
    wait(driver).until(ec.staleness_of(old))
    if SCREENSHOTS:
        wait(driver).until(_busy)
    screenshot(driver, "overview")

    open_page(driver, base + "queues/email")
    assert text_of(driver, "#queue-name") == "email"
    points = 6 if SCREENSHOTS else 1
    wait(driver).until(lambda d: any(
        len((p.get_attribute("points") or "").split()) >= points
        for p in d.find_elements(By.CSS_SELECTOR, "svg.chart polyline")))  # fmt: skip
    assert "configured" in text_of(driver, ".worker")
    screenshot(driver, "queue")

    open_page(driver, base + "jobs?state=failed")
    assert f"{seeded.failed_id}" in text_of(driver, "#jobs-table")
    assert "does not exist" in text_of(driver, f"tr[data-job='{seeded.failed_id}']")
    screenshot(driver, "jobs")

    open_page(driver, f"{base}jobs/{seeded.failed_id}")
    assert text_of(driver, "#job-state") == "failed"
    assert "bounce@example.com" in text_of(driver, "#job-args")
    assert "does not exist" in text_of(driver, "#job-errors")
    assert "newsletter" in text_of(driver, "#job-fields")
    screenshot(driver, "job")

    open_page(driver, base + "runtime")
    instances = text_of(driver, "#instances-table")
    assert "weighted" in instances and "email" in instances and "ok" in instances
    screenshot(driver, "runtime")

    open_page(driver, base + "audit")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Audit"


def test_pause_and_resume_a_queue_from_the_ui(driver: Any, base: str, seeded: Seeded) -> None:
    set_operator(driver, base, "alice")
    open_page(driver, base)
    click(driver, "button[data-action='pause'][data-queue='reports']")
    assert confirm(driver) == "Pause queue reports?"

    def paused() -> bool:  # (resumed, a queue with no jobs left would not be listed)
        stat = next((s for s in seeded.client.queue_stats() if s.queue == "reports"), None)
        return stat is not None and stat.paused

    wait_until(paused)
    with psycopg.connect(seeded.client.database_url, autocommit=True) as conn:
        by = conn.execute("SELECT paused_by FROM awa.queue_meta WHERE queue='reports'").fetchone()
    assert by == ("alice@127.0.0.1",)
    row_text = "return document.querySelector(\"tr[data-queue='reports']\")?.innerText ?? ''"
    wait(driver).until(lambda d: "paused" in d.execute_script(row_text))
    assert "alice@127.0.0.1" in text_of(driver, "#audit-table")

    click(driver, "button[data-action='resume'][data-queue='reports']")
    assert confirm(driver) == "Resume queue reports?"
    wait_until(lambda: not paused())


# Clicks the button as soon as a live refresh has swapped the section in: the swap and the
# processing of its new forms must be one step, or the click submits the form natively.
_CLICK_AFTER_SWAP = """
const css = arguments[0];
document.body.addEventListener("htmx:afterSwap", () => {
  setTimeout(() => document.querySelector(css).click());
}, {once: true});
"""


def test_a_click_right_after_a_live_refresh_still_asks(
    driver: Any, base: str, seeded: Seeded
) -> None:
    open_page(driver, base)
    driver.execute_script(_CLICK_AFTER_SWAP, "button[data-action='pause'][data-queue='email']")
    assert confirm(driver) == "Pause queue email?"
    wait_until(lambda: next(s for s in seeded.client.queue_stats() if s.queue == "email").paused)
    seeded.client.resume_queue("email")


def test_dismissed_confirmation_does_nothing(driver: Any, base: str, seeded: Seeded) -> None:
    open_page(driver, base)
    click(driver, "button[data-action='pause'][data-queue='email']")
    wait(driver).until(ec.alert_is_present()).dismiss()
    stat = next(s for s in seeded.client.queue_stats() if s.queue == "email")
    assert stat.paused is False


def test_set_and_clear_overrides_from_the_form(driver: Any, base: str, seeded: Seeded) -> None:
    open_page(driver, base + "queues/email")
    for name, value in (("poll_interval_ms", "750"), ("rate_limit", "12.5")):
        field = driver.find_element(By.ID, f"override-{name}")
        field.clear()
        field.send_keys(value)
    click(driver, "#save-overrides")
    assert confirm(driver) == "Replace every runtime override of email?"

    def stored() -> awa.RuntimeOverrides | None:
        o = seeded.client.queue_runtime_overrides("email")
        return o if o is not None and o.poll_interval_ms == 750 else None

    overrides = wait_until(stored)
    assert (overrides.rate_limit, overrides.claim_batch_size) == (12.5, None)
    # The page reloads; the live worker reports the new effective values.
    wait(driver).until(lambda d: "12.5" in d.find_element(
        By.CSS_SELECTOR, ".worker tr[data-setting='rate_limit']").text)  # fmt: skip
    wait(driver).until(lambda d: "override" in d.find_element(
        By.CSS_SELECTOR, "#audit-table").text)  # fmt: skip
    screenshot(driver, "queue-overrides")

    # A refused value: the message shows, nothing is written.
    field = driver.find_element(By.ID, "override-rate_limit")
    field.clear()
    field.send_keys("-3")
    click(driver, "#save-overrides")
    confirm(driver)
    assert "rate_limit" in text_of(driver, "#flash-error")
    assert seeded.client.queue_runtime_overrides("email") == overrides

    click(driver, "#clear-overrides")
    assert confirm(driver) == "Clear every runtime override of email?"

    def cleared() -> bool:  # (a row left holding nothing is deleted: then None)
        o = seeded.client.queue_runtime_overrides("email")
        return o is None or o.poll_interval_ms is None

    wait_until(cleared)


def test_cancel_and_retry_a_job(driver: Any, base: str, seeded: Seeded) -> None:
    open_page(driver, f"{base}jobs/{seeded.parked_id}")
    assert text_of(driver, "#job-state") == "scheduled"
    click(driver, "#cancel-job")
    assert confirm(driver) == f"Cancel job {seeded.parked_id}?"
    wait_until(lambda: seeded.client.get_job(seeded.parked_id).state == awa.JobState.CANCELLED)
    wait(driver).until(lambda d: d.find_element(By.ID, "job-state").text == "cancelled")
    click(driver, "#retry-job")
    confirm(driver)
    wait_until(lambda: seeded.client.get_job(seeded.parked_id).state == awa.JobState.AVAILABLE)
    audit = text_of(driver, "#audit-table")
    assert "cancel" in audit and "retry" in audit


def test_read_only_hides_actions_and_refuses_posts(
    driver: Any, serve: Serve, seeded: Seeded
) -> None:
    ro = serve("--read-only")
    for path in ("", "queues/email", f"jobs/{seeded.failed_id}"):
        open_page(driver, ro + path)
        assert driver.find_element(By.ID, "read-only-badge").text == "read-only"
        assert driver.find_elements(By.CSS_SELECTOR, "[hx-post], form[method=post]") == []
        assert driver.find_elements(By.ID, "operator-form") == []
    status, _ = http(ro + "actions/queue/pause", data={"queue": "email"})
    assert status == 403
    stat = next(s for s in seeded.client.queue_stats() if s.queue == "email")
    assert stat.paused is False


def test_token_is_required_when_set(driver: Any, serve: Serve, seeded: Seeded) -> None:
    guarded = serve("--token", "s3cret-token")
    open_page(driver, guarded)
    assert "needs its access token" in text_of(driver, "#login-message")
    assert driver.find_elements(By.ID, "queues-table") == []
    driver.find_element(By.ID, "token").send_keys("wrong")
    driver.find_element(By.CSS_SELECTOR, "form button").click()
    wait(driver).until(lambda d: "not right" in d.find_element(By.ID, "login-message").text)
    driver.find_element(By.ID, "token").send_keys("s3cret-token")
    driver.find_element(By.CSS_SELECTOR, "form button").click()
    wait(driver).until(lambda d: d.find_elements(By.ID, "queues-table"))
    assert "token" not in driver.current_url  # dropped from the address bar

    # Mutations need the token AND the CSRF token, even with a valid bearer token.
    bearer = {"Authorization": "Bearer s3cret-token"}
    assert http(guarded + "actions/queue/pause", data={"queue": "email"})[0] == 401
    assert http(guarded + "actions/queue/pause", data={"queue": "email"}, headers=bearer)[0] == 403
    # The login redirect never leaves the site.
    status, _, headers = http_response(guarded + "/evil.example/?token=s3cret-token")
    assert (status, headers["location"]) == (303, "/evil.example/")
    # ...and the browser, which has both, may act.
    click(driver, "button[data-action='pause'][data-queue='email']")
    confirm(driver)
    wait_until(lambda: next(s for s in seeded.client.queue_stats() if s.queue == "email").paused)
    seeded.client.resume_queue("email")


def test_unknown_job_and_foreign_host_are_refused(driver: Any, base: str) -> None:
    open_page(driver, base + "jobs/999999")
    assert "not found" in text_of(driver, "#error-message")
    port = re.search(r":(\d+)/", base)
    assert port is not None
    status, _ = http(base, headers={"Host": f"attacker.example:{port.group(1)}"})
    assert status == 400
