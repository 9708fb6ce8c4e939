"""The ``/metrics`` server's socket: the address family follows the host."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from awa.metrics.http import MetricsServer


class _Fixed:
    def render(self, *, stats: bool = True) -> bytes:
        return b"awa_test 1\n"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", ""])
def test_metrics_are_served_on_the_hosts_address_family(host: str) -> None:
    """``ThreadingHTTPServer`` is IPv4's only: ``--metrics-host ::1`` failed, blamed on
    the port (a review)."""
    if host == "::1" and not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    with MetricsServer(_Fixed(), port=0, host=host) as server:
        url = server.url.replace("0.0.0.0", "127.0.0.1")  # "": every interface (a review)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.read() == b"awa_test 1\n"
    if host == "::1":
        assert server.url.startswith("http://[::1]:")


def test_a_host_that_does_not_resolve_is_named_as_such() -> None:
    with pytest.raises(socket.gaierror):
        MetricsServer(_Fixed(), port=0, host="no-such-host.invalid")
