"""The dashboard's pure parts, without a browser or a database: security checks, the
sampler's arithmetic, the SVG charts and the audit log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.requests import Request

import awa
from awa.dashboard.audit import AuditLog
from awa.dashboard.charts import line_chart
from awa.dashboard.samples import COST_SHARE, QueuePoint, Sample, Sampler
from awa.dashboard.security import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Guard,
    cookie_name,
    is_loopback,
    local_path,
    local_redirect,
    origin_of,
)


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    if "host" not in headers:
        raw.append((b"host", b"127.0.0.1:8000"))
    scope = {"type": "http", "method": "POST", "path": "/", "scheme": "http", "headers": raw}
    return Request(scope)


def named(base: str) -> str:
    """The name this dashboard (at 127.0.0.1:8000) gives the cookie ``base``."""
    return cookie_name(request({}), base)


def test_two_dashboards_of_one_host_keep_their_cookies_apart() -> None:
    """Browsers share cookies across a host's ports: prod on 8000 and staging on 8001
    replaced each other's CSRF cookie (actions refused) and logged each other out."""
    names = {cookie_name(request({"host": host}), CSRF_COOKIE)
             for host in ("127.0.0.1:8000", "127.0.0.1:8001")}  # fmt: skip
    assert len(names) == 2 and all(n.startswith(f"{CSRF_COOKIE}_") for n in names)
    mounted = Request({"type": "http", "method": "GET", "path": "/", "scheme": "http",
                       "root_path": "/awa", "headers": [(b"host", b"127.0.0.1:8000")]})  # fmt: skip
    assert cookie_name(mounted, CSRF_COOKIE) not in names  # two mounts of one app too
    value = Guard(None, read_only=False).new_csrf()
    other_port = request({"cookie": f"{named(CSRF_COOKIE)}={value}", "host": "127.0.0.1:8001"})
    assert not Guard(None, read_only=False).csrf_ok(other_port, value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True),
     ("[::1]", True), ("0.0.0.0", False), ("192.168.1.5", False), ("example.com", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_local_path_never_leaves_the_site() -> None:
    assert local_path("//evil.example/x") == "/evil.example/x"
    assert local_path("/\\evil.example") == "/evil.example"
    assert local_path("/queues/email") == "/queues/email"
    assert local_path("/\t/evil.example") == "/evil.example"
    assert local_path("/\n\r/\x7f/evil.example") == "/evil.example"


@pytest.mark.parametrize(
    "target",
    ["//evil.example", "/\\evil.example", "/\t/evil.example", "/\n/evil.example",
     "/\r\n//evil.example", "https://evil.example/", "evil.example", "", None, 5,
     "/\x00/x", "\\/evil.example", "/\x7f/evil.example"],
)  # fmt: skip
def test_a_redirect_target_that_could_leave_the_site_is_refused(target: object) -> None:
    assert local_redirect(target) is None


def test_local_redirect_keeps_paths_and_queries() -> None:
    for target in ("/", "/queues/email", "/queues/a%2Fb?x=1", "/jobs?state=failed#top"):
        assert local_redirect(target) == target


def test_origin_of_is_what_a_browser_sends() -> None:
    assert origin_of("https://Dash.Example.com/") == "https://dash.example.com"
    assert origin_of("https://dash.example.com:443") == "https://dash.example.com"
    assert origin_of("http://dash.example.com:80") == "http://dash.example.com"
    assert origin_of("https://dash.example.com:8443") == "https://dash.example.com:8443"
    assert origin_of("http://[::1]:8000") == "http://[::1]:8000"


def _at(host: str, scheme: str = "http", origin: str | None = None) -> Request:
    headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
    scope = {"type": "http", "method": "POST", "path": "/", "scheme": scheme,
             "headers": headers, "server": ("127.0.0.1", 8000)}  # fmt: skip
    return Request(scope)


def test_a_public_url_admits_its_origin_and_makes_cookies_secure() -> None:
    plain = Guard(None, read_only=False)
    proxied = Guard(None, read_only=False, public_url="https://dash.example.com")
    rewritten = _at("127.0.0.1:8000", origin="https://dash.example.com")
    assert not plain.origin_allowed(rewritten, "https://dash.example.com")
    assert proxied.origin_allowed(rewritten, "https://dash.example.com")
    assert proxied.origin_allowed(rewritten, "https://dash.example.com:443")
    assert not proxied.origin_allowed(rewritten, "https://evil.example")
    assert not proxied.origin_allowed(rewritten, "http://dash.example.com")  # not https
    assert proxied.origin_allowed(_at("127.0.0.1:8000"), "http://127.0.0.1:8000")  # direct
    assert proxied.secure(_at("dash.example.com"))  # the public host of an https URL
    assert proxied.secure(_at("127.0.0.1:8000", scheme="https"))  # a trusted proxy said so
    assert not proxied.secure(_at("127.0.0.1:8000"))  # direct, plain http
    assert not plain.secure(_at("dash.example.com"))


def test_token_cookie_is_an_hmac_not_the_token() -> None:
    guard = Guard("s3cret", read_only=False)
    assert "s3cret" not in guard.session_value()
    assert guard.authenticated(
        request({"cookie": f"{named(SESSION_COOKIE)}={guard.session_value()}"})
    )
    assert guard.authenticated(request({"authorization": "Bearer s3cret"}))
    assert guard.authenticated(request({"x-awa-token": "s3cret"}))
    assert not guard.authenticated(request({"authorization": "Bearer nope"}))
    assert not guard.authenticated(request({}))
    assert Guard(None, read_only=False).authenticated(request({}))


def test_csrf_needs_our_signed_cookie_echoed_from_our_origin() -> None:
    guard = Guard(None, read_only=False)
    value = guard.new_csrf()
    cookie = {"cookie": f"{named(CSRF_COOKIE)}={value}", "host": "127.0.0.1:8000"}
    assert guard.csrf_ok(request(cookie), value)
    assert guard.csrf_ok(request({**cookie, "origin": "http://127.0.0.1:8000"}), value)
    assert not guard.csrf_ok(request({**cookie, "origin": "http://evil.example"}), value)
    assert not guard.csrf_ok(request(cookie), None)
    assert not guard.csrf_ok(request(cookie), guard.new_csrf())  # another value
    forged = "nonce.0000"
    assert not guard.csrf_ok(request({"cookie": f"{named(CSRF_COOKIE)}={forged}"}), forged)
    other = Guard(None, read_only=False).new_csrf()  # signed by another process
    assert not guard.csrf_ok(request({"cookie": f"{named(CSRF_COOKIE)}={other}"}), other)


def _sampler(points: list[tuple[float, int, int]]) -> Sampler:
    sampler = Sampler(client=None, interval_s=5.0)  # type: ignore[arg-type]
    for at, per_minute, running in points:
        sampler._samples.append(Sample(at, {"q": QueuePoint(per_minute, running, 0)}))
    return sampler


def test_throughput_and_series() -> None:
    """Each sample's completions of the minute before it: differences of the retained
    completed count read 0 per minute for a steady queue, as the pruner takes a minute
    of yesterday's completions out of it every minute (a review)."""
    sampler = _sampler([(0.0, 40, 1), (30.0, 60, 2), (60.0, 90, 3), (90.0, 30, 0)])
    ago, rate, running = sampler.series("q")
    assert ago == [90.0, 60.0, 30.0, 0.0]
    assert rate == [40.0, 60.0, 90.0, 30.0]
    assert running == [1.0, 2.0, 3.0, 0.0]
    assert _sampler([(0.0, 7, 0)]).series("q") == ([], [], [])  # one point draws no line


async def test_a_slow_sample_spaces_the_next_ones_out() -> None:
    """A slow queue_stats() (before ADR 0054 it read every retained finished job, a second
    for 3 million) sampled every 5 s with nobody watching took a third of a drain's
    throughput (a review). The next sample waits COST_SHARE times as long as the last one
    took."""

    class SlowStats:
        delay_s = 0.5

        async def queue_stats(self) -> list[awa.QueueStat]:
            await asyncio.sleep(self.delay_s)
            return []

    stats = SlowStats()
    sampler = Sampler(client=stats, interval_s=60.0)  # type: ignore[arg-type]
    await sampler.sample_once()
    assert sampler.interval_s >= COST_SHARE * 0.5
    stats.delay_s = 0.0
    await sampler.sample_once()
    assert sampler.interval_s == 60.0  # cheap again: back to its own interval
    assert len(sampler.samples()) == 2
    sampler.keep_s = 0.0  # samples are kept by age (the interval is not fixed)
    await sampler.sample_once()
    assert len(sampler.samples()) == 1


def test_line_chart_escapes_and_handles_few_points() -> None:
    empty = line_chart("<b>rate</b>", [], [], "line-rate")
    assert "collecting samples" in empty and "<b>" not in empty
    chart = str(line_chart("rate", [10.0, 5.0, 0.0], [1.0, 4.0, 2.0], "line-rate"))
    assert chart.startswith("<svg") and "<polyline" in chart and ">4<" in chart


def test_audit_log_keeps_newest_first_and_logs(caplog: Any) -> None:
    audit = AuditLog(maxlen=2)
    with caplog.at_level(logging.INFO, logger="awa.dashboard"):
        audit.record("alice@127.0.0.1", "pause", "queue email")
        audit.record("bob@127.0.0.1", "resume", "queue email")
        audit.record("carol@127.0.0.1", "retry", "job 7", "now available")
    assert [e.who for e in audit.recent()] == ["carol@127.0.0.1", "bob@127.0.0.1"]
    assert audit.recent(1)[0].detail == "now available"
    assert "pause queue email by alice@127.0.0.1" in caplog.text


def test_the_audit_log_keeps_one_action_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A queue name with a newline printed a second, forged "dashboard action" line."""
    forged = "x\n2026-12-06 19:30:00 awa.dashboard INFO dashboard action: clear fleet pool"
    with caplog.at_level(logging.INFO, logger="awa.dashboard"):
        entry = AuditLog().record("ada@127.0.0.1", "pause", forged)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "awa.dashboard"]
    assert "\n" not in line and "x\\n2026" in line
    assert entry.target == forged  # the page shows it as given (escaped as HTML there)
