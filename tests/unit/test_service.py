"""LoopService under an eager task factory (Python 3.12's asyncio.eager_task_factory):
the loop's first step runs inside create_task, before start() has recorded the task. It
read that as "stopped", and every loop of a worker ended at once, silently (a review:
start() returned, no job ever ran, only health_check() said so)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from awa.service import LoopService


class Recorder(LoopService):
    def __init__(self) -> None:
        super().__init__("recorder")
        self.first_look: bool | None = None
        self.rounds = 0
        self.ran = asyncio.Event()  # three rounds of the loop

    async def _run(self) -> None:
        self.first_look = self.stopping
        await asyncio.sleep(0)  # a bare yield: the factory below resumes it with None
        while not self.stopping:
            self.rounds += 1
            if self.rounds >= 3:
                self.ran.set()
            await asyncio.sleep(0.001)


async def test_the_first_step_run_inside_create_task_is_not_a_stop() -> None:
    """The eager start emulated on any Python: the factory runs the coroutine's first
    step itself, up to its first bare yield, then hands the rest to a plain task."""
    loop = asyncio.get_running_loop()

    def eager(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        coro.send(None)
        return asyncio.Task(coro, loop=loop, **kwargs)

    service = Recorder()
    loop.set_task_factory(eager)
    try:
        service.start()
    finally:
        loop.set_task_factory(None)
    assert service.first_look is False
    await asyncio.wait_for(service.ran.wait(), 10)
    await service.stop()
    assert not service.alive


@pytest.mark.skipif(not hasattr(asyncio, "eager_task_factory"), reason="Python 3.12+")
async def test_loops_run_under_the_real_eager_task_factory() -> None:
    loop = asyncio.get_running_loop()
    loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
    try:
        service = Recorder()
        service.start()
        await asyncio.wait_for(service.ran.wait(), 10)
        await service.stop()
    finally:
        loop.set_task_factory(None)


class Once(Recorder):
    """A loop that ends by itself after its first round."""

    async def _run(self) -> None:
        self.looks = [*getattr(self, "looks", []), self.stopping]
        await asyncio.sleep(0)


async def test_a_loop_that_ended_by_itself_starts_again_eagerly() -> None:
    """After a loop ended by itself its finished task is still recorded: the eager first
    step of the next start compared against it and read "stopped" (a review)."""
    loop = asyncio.get_running_loop()

    def eager(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        coro.send(None)
        return asyncio.Task(coro, loop=loop, **kwargs)

    service = Once()
    service.start()
    assert service._task is not None
    await service._task  # ended by itself
    loop.set_task_factory(eager)
    try:
        service.start()
    finally:
        loop.set_task_factory(None)
    assert service.looks == [False, False]
    await service.stop()
