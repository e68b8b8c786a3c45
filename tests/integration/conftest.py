"""A gateway in front of two simulated workers, as real processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from loadtest.procs import Proc, start_gateway, start_sim, wait_until


@dataclass
class Stack:
    gateway: str
    workers: list[str]
    procs: list[Proc]

    def ready(self, n: int) -> bool:
        body = httpx.get(self.gateway + "/admin/workers", timeout=5).json()
        return sum(w["healthy"] and bool(w["models"]) for w in body["workers"]) >= n


def make_stack(tmp_path_factory: pytest.TempPathFactory, n_workers: int = 2,
               gateway_args: tuple[str, ...] = (), sim_args: tuple[str, ...] = ()) -> Stack:
    tmp = tmp_path_factory.mktemp("stack")
    sims = [start_sim(tmp, extra=sim_args) for _ in range(n_workers)]
    gw, url = start_gateway(tmp, [u for _, u in sims], *gateway_args)
    stack = Stack(url, [u for _, u in sims], [gw, *(p for p, _ in sims)])
    assert wait_until(lambda: stack.ready(n_workers), 20), "workers never became healthy"
    return stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory, 2, ("--max-body-bytes", "2000000"))
    yield s
    for p in s.procs:
        p.stop()


@pytest.fixture
def fresh_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own, for tests that kill processes."""
    s = make_stack(tmp_path_factory, 2)
    yield s
    for p in s.procs:
        p.stop()
