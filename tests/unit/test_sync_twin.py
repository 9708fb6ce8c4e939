"""The blocking Client is generated from AsyncClient: every public coroutine method of the
async core has a blocking twin of the same name on Client (none written by hand)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

import awa
from awa.client.sync_client import _blocking


def _public_coroutines(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }


def test_every_async_method_has_a_generated_blocking_twin() -> None:
    missing = _public_coroutines(awa.AsyncClient) - set(dir(awa.Client))
    assert not missing, f"add `name = _blocking(AsyncClient.name)` to Client for: {missing}"
    for name in _public_coroutines(awa.AsyncClient) - {"close"}:
        twin = inspect.getattr_static(awa.Client, name)
        assert isinstance(twin, _blocking), f"Client.{name} is not the generated twin"
        assert twin._method is getattr(awa.AsyncClient, name), name


def test_a_blocking_twin_shows_its_async_methods_signature() -> None:
    """help(), inspect.signature and IDEs saw an extra leading ``self`` on every bound
    twin (``signature(...).bind`` then misplaced the arguments), and looking a twin up on
    the class gave an object ``inspect`` refused (found by a review)."""
    sync, core = awa.Client("postgresql://user@localhost/db"), awa.AsyncClient("postgresql://u@h/d")
    try:
        for name in _public_coroutines(awa.AsyncClient) - {"close"}:
            bound = inspect.signature(getattr(sync, name))
            assert bound == inspect.signature(getattr(core, name)), name
            on_class = inspect.signature(getattr(awa.Client, name))
            assert on_class == inspect.signature(getattr(awa.AsyncClient, name)), name
        assert inspect.signature(sync.insert).bind({"n": 1}, kind="k").arguments["args"] == {"n": 1}
    finally:
        sync.close()


@pytest.mark.parametrize("make", [awa.AsyncClient, awa.Client], ids=["async", "sync"])
def test_a_client_refuses_to_be_pickled_saying_what_to_do(make: Any) -> None:
    """Passed to a process pool, a client failed deep in pickle on an asyncio Task."""
    client = make("postgresql://user@localhost/db")
    try:
        with pytest.raises(TypeError, match="cannot be pickled: make one in each process"):
            pickle.dumps(client)
    finally:
        if isinstance(client, awa.Client):
            client.close()
