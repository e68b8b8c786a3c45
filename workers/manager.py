"""WorkerManager: start engine processes, wait until ready, restart on crash, stop cleanly.

Each replica runs in its own process session (so its whole process tree can be signalled
as a group) and, on Linux, asks the kernel to SIGTERM it if the manager dies, so a killed
manager leaves no orphans. A replica that exits unexpectedly is reported down at once and
restarted after an exponential backoff (1 s doubling to 30 s, reset once it has stayed up
for a minute). Stopping sends SIGTERM to every group, waits ``grace_s``, then SIGKILLs
whatever is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from workers.engines.base import EngineAdapter, LaunchSpec

log = logging.getLogger(__name__)

Callback = Callable[["ManagedWorker"], Awaitable[None] | None]


@dataclass(eq=False)
class ManagedWorker:
    spec: LaunchSpec
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    ready: bool = False

    @property
    def worker_id(self) -> str:
        return f"w{self.spec.index}"

    @property
    def url(self) -> str:
        return self.spec.url


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class WorkerManager:
    def __init__(self, adapter: EngineAdapter, specs: list[LaunchSpec], *,
                 on_ready: Callback | None = None, on_down: Callback | None = None,
                 grace_s: float = 10.0, max_backoff_s: float = 30.0,
                 log_dir: str | None = None) -> None:
        self.adapter = adapter
        self.workers = [ManagedWorker(spec) for spec in specs]
        self.on_ready = on_ready
        self.on_down = on_down
        self.grace_s = grace_s
        self.max_backoff_s = max_backoff_s
        self.log_dir = log_dir
        self._stopping = False
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Launch every replica and wait until each is ready (or raise)."""
        await asyncio.gather(*(self._launch(w) for w in self.workers))
        await asyncio.gather(*(self._await_ready(w) for w in self.workers))
        self._tasks = [asyncio.create_task(self._supervise(w)) for w in self.workers]

    async def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL what outlives the grace period."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        live = [w.process for w in self.workers if w.process and w.process.returncode is None]
        for process in live:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for process in live:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), max(0.0, deadline - time.monotonic()))
            _signal_group(process.pid, signal.SIGKILL)  # stragglers in the group, if any
            if process.returncode is None:
                await process.wait()

    async def _launch(self, worker: ManagedWorker) -> None:
        env = {**os.environ, **self.adapter.environment(worker.spec), **worker.spec.env}
        output = None
        if self.log_dir:
            os.makedirs(self.log_dir, exist_ok=True)
            output = open(os.path.join(self.log_dir, f"{worker.worker_id}.log"), "ab")  # noqa: SIM115
        worker.process = await asyncio.create_subprocess_exec(
            *self.adapter.command(worker.spec), env=env, stdout=output, stderr=output,
            stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        if output is not None:
            output.close()
        worker.started_at = time.monotonic()
        worker.ready = False
        log.info("started %s (pid %d) on %s", worker.worker_id, worker.process.pid, worker.url)

    async def _await_ready(self, worker: ManagedWorker) -> None:
        deadline = time.monotonic() + self.adapter.startup_timeout_s
        url = worker.url + self.adapter.ready_path
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if worker.process is None or worker.process.returncode is not None:
                    raise RuntimeError(f"{worker.worker_id} exited during start-up")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code == 200:
                        worker.ready = True
                        await _call(self.on_ready, worker)
                        return
                await asyncio.sleep(0.1)
        raise TimeoutError(f"{worker.worker_id} not ready after "
                           f"{self.adapter.startup_timeout_s:.0f}s")

    async def _supervise(self, worker: ManagedWorker) -> None:
        backoff = 1.0
        while not self._stopping:
            assert worker.process is not None
            code = await worker.process.wait()
            if self._stopping:
                return
            worker.ready = False
            log.warning("%s exited with %s; restarting in %.0fs", worker.worker_id, code, backoff)
            await _call(self.on_down, worker)
            await asyncio.sleep(backoff)
            if time.monotonic() - worker.started_at > 60.0:
                backoff = 1.0
            else:
                backoff = min(backoff * 2, self.max_backoff_s)
            worker.restarts += 1
            await self._launch(worker)
            try:
                await self._await_ready(worker)
            except (RuntimeError, TimeoutError) as exc:
                log.error("%s failed to restart: %s", worker.worker_id, exc)
                if worker.process and worker.process.returncode is None:
                    _signal_group(worker.process.pid, signal.SIGKILL)


async def _call(callback: Callback | None, worker: ManagedWorker) -> None:
    if callback is not None:
        result = callback(worker)
        if asyncio.iscoroutine(result):
            await result


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
