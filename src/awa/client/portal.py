"""A private event loop in a daemon thread, so blocking code can call the async core.

A call is a future on that loop: interrupted (Ctrl-C) it is cancelled, not left to run
on; a call in flight when the portal closes is cancelled and raises
:class:`~awa.errors.ClientClosed`. A process forked from the one that made the portal
(gunicorn's ``--preload``) has no loop thread: its first call starts its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from awa.db import forking
from awa.errors import BlockingCallOnLoop, ClientClosed

R = TypeVar("R")
logger = logging.getLogger("awa")

CLOSE_WAIT_S = 5.0  # for calls in flight to end once cancelled
SIGNAL_CHECK_S = 0.2  # a blocked call looks for a pending Ctrl-C this often


def _result(future: concurrent.futures.Future[R]) -> R:
    """``future``'s result, waited for in slices: a SIGINT delivered to another thread
    (the loop's, a handler's) only marks the signal, and its KeyboardInterrupt is raised
    when this thread next runs Python — an unbounded wait held it back until the call
    had ended."""
    while True:  # (not result(timeout=): a call's own TimeoutError would read as a slice)
        done, _ = concurrent.futures.wait([future], timeout=SIGNAL_CHECK_S)
        if done:
            return future.result()


class Portal:
    """Runs coroutines on one background event loop and waits for their results."""

    def __init__(self, name: str = "awa-sync") -> None:
        self._name = name
        self._lock = threading.Lock()  # submissions against close()
        self._closed = False
        self._calls: set[asyncio.Task[Any]] = set()  # in flight (not a worker's own tasks)
        self._waiting: set[concurrent.futures.Future[Any]] = set()  # callers blocked on these
        self._death: BaseException | None = None  # what stopped the loop, if anything did
        self._unattended = False  # closed by close_soon(): the loop thread ends on its own
        self._start()
        forking.reset_in_child(self)

    def _forget_parent(self) -> None:
        """In a forked child: the loop thread, its calls and whoever held the lock stayed
        in the parent. The next call starts a loop of this process's own."""
        self._lock = threading.Lock()
        self._calls = set()
        self._waiting = set()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=self._name,
                                        daemon=True)  # fmt: skip
        self._thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(ready.set)
        try:
            self._loop.run_forever()
        except BaseException as exc:  # SystemExit out of a hook, say: the loop is gone
            self._died(exc)
            self._loop.close()
        else:
            if self._unattended:  # close_soon(): nobody joins this thread to close it
                self._loop.close()

    def _died(self, exc: BaseException) -> None:
        """The loop stopped on an exception: no call can ever finish, so every call
        waiting and every later one raises instead of hanging."""
        logger.error("awa: the sync client's event loop stopped: %r", exc)
        with self._lock:
            self._closed = True
            self._death = exc
            waiting, self._waiting = self._waiting, set()
        for future in waiting:
            if not future.done():
                future.set_exception(self._closed_error())

    def _closed_error(self) -> ClientClosed:
        if self._death is None:
            return ClientClosed("this client is closed")
        return ClientClosed(f"this client's event loop stopped: {self._death!r}")

    @property
    def closed(self) -> bool:
        """True once closed (or its loop died): no call runs any more."""
        return self._closed

    @property
    def inherited(self) -> bool:
        """True in a forked child that has not used this portal: its loop thread is the
        parent's, and nothing of it runs here."""
        return self._pid != os.getpid()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The background loop."""
        return self._loop

    def _refuse_on_own_loop(self, what: str, coro: Coroutine[Any, Any, Any] | None) -> None:
        # A blocking call made on the loop thread would wait for that same thread: forever.
        if threading.current_thread() is self._thread:
            if coro is not None:
                coro.close()
            raise BlockingCallOnLoop(
                f"{what} was made on the client's own event loop (an async handler or "
                "hook of its worker): await the same call on client.async_client there, or "
                "make the handler a plain def"
            )

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the background loop and return its result (or raise its error)."""
        self._refuse_on_own_loop("a blocking awa.Client call", coro)
        with self._lock:
            if self._closed:
                coro.close()
                raise self._closed_error()
            if self._pid != os.getpid():  # forked: the loop thread stayed in the parent
                self._start()
            future = asyncio.run_coroutine_threadsafe(self._tracked(coro), self._loop)
            self._waiting.add(future)
        try:
            return _result(future)
        except concurrent.futures.CancelledError:
            if self._closed:
                raise ClientClosed("this client was closed during the call") from None
            raise
        except BaseException:
            future.cancel()  # interrupted (KeyboardInterrupt): the call must not go on
            raise
        finally:
            with self._lock:
                self._waiting.discard(future)

    def close(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Refuse new calls, cancel those in flight, run ``last`` (the client's own close),
        then stop the loop and join its thread. Idempotent."""
        self._refuse_on_own_loop("awa.Client.close()", last)  # before it counts as closed
        with self._lock:
            if self._closed:
                if last is not None:
                    last.close()
                return
            self._closed = True
        if self._pid != os.getpid():  # forked, and never used here: nothing runs
            if last is not None:
                last.close()
            return
        with self._lock:
            if self._death is not None:  # the loop is gone: nothing can run on it
                if last is not None:
                    last.close()
                return
            done = asyncio.run_coroutine_threadsafe(self._wind_down(last), self._loop)
            self._waiting.add(done)  # failed by _died if the loop stops meanwhile
        try:
            done.result()
        except ClientClosed:
            if self._death is None:
                raise  # (the loop died during the close: closed all the same)
        finally:
            with self._lock:
                self._waiting.discard(done)
            if self._death is None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            if not self._loop.is_closed():
                self._loop.close()

    def close_soon(self, last: Coroutine[Any, Any, Any]) -> None:
        """:meth:`close` without waiting, from any thread (a collected client's finalizer):
        refuse new calls, cancel those in flight, run ``last``, then the loop stops and its
        thread ends and closes it. Nothing when closed already or forked since."""
        with self._lock:
            if self._closed or self._death is not None or self._pid != os.getpid():
                last.close()
                return
            self._closed = self._unattended = True
            done = asyncio.run_coroutine_threadsafe(self._wind_down(last), self._loop)
        done.add_done_callback(lambda _: self._loop.call_soon_threadsafe(self._loop.stop))

    async def _tracked(self, coro: Coroutine[Any, Any, R]) -> R:
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            return await coro
        finally:
            self._calls.discard(task)

    async def _wind_down(self, last: Coroutine[Any, Any, Any] | None) -> None:
        calls = list(self._calls)
        for task in calls:
            task.cancel()
        if calls:  # their connections go back to the pool before ``last`` closes it
            await asyncio.wait(calls, timeout=CLOSE_WAIT_S)
        if last is not None:
            await last
