"""The dashboard's error pages: an unexpected failure is a page naming it, sent with the
same security headers as every other page (Starlette answers it outside the guard)."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from awa.dashboard.app import PAGE_POOL_TIMEOUT_S, DashboardSettings, create_app
from awa.dashboard.security import SECURITY_HEADERS


def test_a_page_that_fails_unexpectedly_keeps_the_security_headers(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(DashboardSettings(database_url=database_url))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as http:
        ok = http.get("/pool")
        assert ok.status_code == 200

        async def broken() -> None:
            raise RuntimeError("a bug on the pool page")

        monkeypatch.setattr(app.state.dashboard.client, "fleet_pool", broken)
        page = http.get("/pool")
    assert page.status_code == 500 and "a bug on the pool page" in page.text
    for name, value in SECURITY_HEADERS.items():
        assert page.headers.get(name) == value == ok.headers.get(name), name


def test_a_page_without_a_connection_gives_up_soon_and_says_so(database_url: str) -> None:
    """No connection to be had (all held here, as in an outage the pool cannot refill):
    the page answers 503 after the dashboard's own wait, not a worker's 30 s."""
    app = create_app(DashboardSettings(database_url=database_url))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        assert http.portal is not None
        client = app.state.dashboard.client
        pool = http.portal.call(client._get_pool)
        held = [http.portal.call(pool.getconn) for _ in range(client.max_connections)]
        try:
            page = http.get("/pool")
        finally:
            for conn in held:
                http.portal.call(pool.putconn, conn)
        assert http.get("/pool").status_code == 200  # and back once connections are free
    assert page.status_code == 503 and "did not answer" in page.text
    assert f"after {PAGE_POOL_TIMEOUT_S:.2f} sec" in page.text


def test_a_job_id_no_job_can_have_is_not_found(database_url: str) -> None:
    app = create_app(DashboardSettings(database_url=database_url))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as http:
        for job_id in ("0", "99999999999999999999999", "42"):
            page = http.get(f"/jobs/{job_id}")
            assert page.status_code == 404 and "not found" in page.text, job_id
