"""Talking to a peer adapter subprocess (see bench/adapters/_common.py for the protocol)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from harness.peers import ADAPTERS, Peer

PREFIX = "@bench "


class AdapterError(Exception):
    """The adapter failed, timed out or broke the protocol; the message says where to look."""


class Adapter:
    """One peer's adapter script, run with that peer's interpreter."""

    def __init__(self, peer: Peer, python: str, log_dir: Path) -> None:
        self.peer = peer
        self.python = python
        self.log = log_dir / f"{peer.venv.name}.log"

    def command(self, name: str, *args: str) -> list[str]:
        script = str(ADAPTERS / self.peer.adapter)
        return [self.python, script, name, *self.peer.extra_args, *args]

    def call(self, name: str, *args: str, timeout: float = 600) -> dict[str, Any]:
        """Run one command to completion; return its last protocol message."""
        with open(self.log, "a") as log:
            log.write(f"\n$ {name} {' '.join(args)}\n")
            log.flush()
            try:
                done = subprocess.run(
                    self.command(name, *args),
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired as exc:
                raise AdapterError(f"{self.peer.name} {name}: timed out ({self.log})") from exc
        messages = [
            line[len(PREFIX) :] for line in done.stdout.splitlines() if line.startswith(PREFIX)
        ]
        if done.returncode != 0:
            raise AdapterError(f"{self.peer.name} {name}: exit {done.returncode} (see {self.log})")
        result: dict[str, Any] = json.loads(messages[-1]) if messages else {}
        return result

    def spawn(self, name: str, *args: str) -> AdapterProcess:
        return AdapterProcess(self, self.command(name, *args))


class AdapterProcess:
    """A long-running adapter (the worker, or a producer next to it)."""

    def __init__(self, adapter: Adapter, argv: list[str]) -> None:
        self.adapter = adapter
        self._log = open(adapter.log, "a")  # noqa: SIM115 - closed in finish()
        self._log.write(f"\n$ {' '.join(argv[2:])}\n")
        self._log.flush()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                self._messages.put(json.loads(line[len(PREFIX) :]))
        self._messages.put(None)

    def expect(self, timeout: float) -> dict[str, Any]:
        """The next protocol message, or AdapterError on exit/timeout."""
        try:
            message = self._messages.get(timeout=timeout)
        except queue.Empty:
            message = None
        if message is None:
            self.kill()
            raise AdapterError(f"{self.adapter.peer.name}: no answer (see {self.adapter.log})")
        return message

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """Send ``stop``, collect the final message, and reap the process."""
        self.send("stop")
        try:
            return self.expect(timeout)
        finally:
            self.kill(grace=10)

    def kill(self, grace: float = 0) -> None:
        """Wait up to ``grace`` s for the process to exit, then kill it. Idempotent."""
        deadline = time.monotonic() + grace
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self._log.closed:
            self._log.close()
