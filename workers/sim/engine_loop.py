"""EngineLoop: drives an EngineModel on the wall clock, ``speed`` times faster than real.

Model time is wall time × ``speed``; each step's outputs are delivered when its model-time
deadline passes on the wall clock. Requests get their tokens through an asyncio queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from workers.sim.model import EngineModel, SimRequest, TokenOut


class EngineLoop:
    def __init__(self, model: EngineModel, speed: float = 1.0,
                 after_step: Callable[[], object] | None = None) -> None:
        self.model = model
        self.speed = speed
        self.after_step = after_step
        self._t0 = time.monotonic()
        self._queues: dict[int, asyncio.Queue[TokenOut]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def now(self) -> float:
        """Model time in seconds."""
        return (time.monotonic() - self._t0) * self.speed

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, request: SimRequest) -> asyncio.Queue[TokenOut]:
        queue: asyncio.Queue[TokenOut] = asyncio.Queue()
        self._queues[id(request)] = queue
        self.model.add(request)
        self._wake.set()
        return queue

    def abort(self, request: SimRequest) -> None:
        if not request.finished:
            self.model.abort(request)
        self._queues.pop(id(request), None)

    async def _run(self) -> None:
        while True:
            if not self.model.has_work:
                self._wake.clear()
                await self._wake.wait()
            start = self.now()
            result = self.model.step(start)
            if result is None:  # nothing can be scheduled until a request is aborted
                await asyncio.sleep(0.001)
                continue
            deadline = self._t0 + (start + result.duration) / self.speed
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.after_step is not None:
                self.after_step()  # publish the step's KV events as its tokens come out
            for out in result.outputs:
                queue = self._queues.get(id(out.request))
                if queue is not None:
                    queue.put_nowait(out)
                    if out.finished:
                        del self._queues[id(out.request)]
