"""Real processes on 127.0.0.1 (tests, benchmarks): start, wait until ready, stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Proc:
    """A child process in its own session, stopped with its whole process group."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          env={**os.environ, **(env or {})})

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_ready(self, url: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"process exited: {self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"{url} not ready in {timeout}s: {self.log.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        self.kill(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            return self.popen.wait(5)


def radixgate(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", *args]


def start_sim(tmp: Path, *, speed: float = 20.0, num_blocks: int = 4096,
              extra: tuple[str, ...] = ()) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(radixgate("sim", "--port", str(port), "--speed", str(speed),
                          "--num-blocks", str(num_blocks), "--log-level", "warning", *extra),
                tmp / f"sim-{port}.log")
    url = f"http://{HOST}:{port}"
    proc.wait_ready(url + "/health")
    return proc, url


def start_gateway(tmp: Path, workers: list[str], *extra: str) -> tuple[Proc, str]:
    port = free_port()
    argv = radixgate("gateway", "--port", str(port), "--health-interval", "0.5",
                     "--log-level", "warning", *extra)
    for w in workers:
        argv += ["--worker", w]
    proc = Proc(argv, tmp / f"gateway-{port}.log")
    url = f"http://{HOST}:{port}"
    proc.wait_ready(url + "/health")
    return proc, url


def wait_until(predicate: object, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@contextlib.contextmanager
def running(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()
