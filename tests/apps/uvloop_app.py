"""``tests.apps.supervised_app``'s client, in an application that runs on uvloop: it sets
uvloop's event loop policy when imported, as ``uvloop.install()`` does."""

from __future__ import annotations

import asyncio

import uvloop

from tests.apps.supervised_app import client

asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

__all__ = ["client"]
