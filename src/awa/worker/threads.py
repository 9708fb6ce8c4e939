"""The threads that run plain ``def`` handlers.

Not :class:`concurrent.futures.ThreadPoolExecutor`, for two reasons:

* its threads are joined when the interpreter exits, so one handler stuck in
  ``time.sleep(1e6)`` kept a worker process alive forever after its shutdown had
  finished, through any number of SIGTERMs. These threads are daemons: a process whose
  worker has shut down exits, and the stuck handler goes with it;
* a thread whose attempt the worker gave up on (:meth:`HandlerThreads.abandon`) stops
  counting against the pool, so another thread may start in its place and the queue
  keeps running jobs (ADR 0016).

Threads start on demand, up to ``size`` plus the number of abandoned threads still
busy; a thread beyond that bound ends when its handler returns.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from awa.errors import WorkerNotRunning


@dataclass(slots=True)
class _Work:
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class HandlerThreads(Executor):
    """Daemon threads for sync handlers; an abandoned thread is replaced."""

    def __init__(self, size: int, name_prefix: str = "awa-job") -> None:
        self._size = max(size, 1)
        self._prefix = name_prefix
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # alive (or starting)
        self._waiting = 0  # idle, or started and not yet idle
        self._queued = 0  # submitted and not yet taken by a thread
        self._abandoned: set[Future[Any]] = set()
        self._closed = False
        self._names = itertools.count(1)

    @property
    def threads(self) -> int:
        """Threads alive now."""
        return self._threads

    @property
    def abandoned(self) -> int:
        """Threads still running work the worker gave up on."""
        return len(self._abandoned)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` on one of the threads."""
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise WorkerNotRunning("the worker's handler threads were shut down")
            self._queued += 1
            self._work.put(_Work(future, fn, args, kwargs))
            if self._queued > self._waiting and self._threads < self._limit():
                self._start_thread()
        return future

    def resize(self, size: int) -> None:
        """At most ``size`` threads from now (plus the abandoned ones); more start on demand
        when work waits, a surplus thread ends when its handler returns."""
        with self._lock:
            self._size = max(size, 1)
            while self._queued > self._waiting and self._threads < self._limit():
                self._start_thread()

    def abandon(self, future: Future[Any]) -> None:
        """The worker gave up waiting for ``future``: its thread stops counting."""
        with self._lock:
            if not future.done():
                self._abandoned.add(future)
                if self._queued > self._waiting and self._threads < self._limit():
                    self._start_thread()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new work; idle threads end. Never waits for a running handler."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                self._cancel_queued()
            for _ in range(self._threads):
                self._work.put(None)

    def _cancel_queued(self) -> None:
        while True:
            try:
                work = self._work.get_nowait()
            except queue.Empty:
                return
            if work is not None:
                self._queued -= 1
                work.future.cancel()

    def _limit(self) -> int:
        return self._size + len(self._abandoned)

    def _start_thread(self) -> None:
        # Counted as waiting from now, so a burst of submissions starts one thread each.
        self._threads += 1
        self._waiting += 1
        name = f"{self._prefix}-{next(self._names)}"
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            with self._lock:
                self._waiting -= 1
                if work is None:
                    self._threads -= 1
                    return
                self._queued -= 1
            self._run(work)
            with self._lock:
                self._abandoned.discard(work.future)
                if self._closed or self._threads > self._limit():
                    self._threads -= 1  # surplus: a replacement took this one's place
                    return
                self._waiting += 1

    @staticmethod
    def _run(work: _Work) -> None:
        if not work.future.set_running_or_notify_cancel():
            return
        try:
            result = work.fn(*work.args, **work.kwargs)
        except BaseException as exc:
            work.future.set_exception(exc)
        else:
            work.future.set_result(result)
