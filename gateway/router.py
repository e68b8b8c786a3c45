"""Router: the routing core in one place: prompt tokens → block keys → index → policy → fleet.

    keys    = block_keys(tokens, namespace)           gateway/index/keys.py
    matched = index.match(keys)                       gateway/index/prefix.py
    choice  = policy.choose(request, cached, view)    gateway/policy/
    ticket  = fleet.admit(worker, ...)                gateway/fleet.py
    index.insert(worker, keys)                        (approximate: the worker will hold it)

It decides; it does not send (see gateway/proxy.py). Synchronous and clock-injected, so the
load-test simulator drives exactly this code in virtual time.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

from gateway.fleet import Fleet, Ticket, Worker
from gateway.index.keys import block_keys, root_seed
from gateway.index.prefix import Pin, PrefixIndex
from gateway.policy.base import (
    Decision,
    FleetView,
    Policy,
    RequestView,
    WorkerId,
    WorkerView,
)
from gateway.sessions import SessionTable, TimedPins


@dataclass(slots=True)
class Route:
    worker: Worker
    decision: Decision
    ticket: Ticket
    keys: bytes
    pin: Pin | None = None


class Router:
    def __init__(self, fleet: Fleet, index: PrefixIndex, policy: Policy,
                 rng: random.Random | None = None, mode: str = "approximate") -> None:
        self.fleet = fleet
        self.index = index
        self.policy = policy
        self.rng = rng or random.Random()
        self.mode = mode
        self.sessions = SessionTable()
        self.pins = TimedPins(index)
        self._seq = 0

    @property
    def block_size(self) -> int:
        return self.fleet.block_size

    # -- membership --------------------------------------------------------------------
    def add_worker(self, worker_id: str, url: str, capacity_blocks: int,
                   max_running: int = 256) -> Worker:
        worker = self.fleet.add_worker(worker_id, url, capacity_blocks, max_running)
        self.index.add_worker(worker.slot, capacity_blocks)
        return worker

    def remove_worker(self, worker_id: str) -> None:
        worker = self.fleet.remove_worker(worker_id)
        if worker is not None:
            self.index.remove_worker(worker.slot)

    def registered(self, worker: Worker) -> bool:
        """Still in the fleet (a slow health check may come back after a removal)."""
        return self.fleet.get(worker.id) is worker

    def set_capacity(self, worker: Worker, capacity_blocks: int) -> None:
        if self.registered(worker):
            worker.capacity_blocks = capacity_blocks
            self.index.set_capacity(worker.slot, capacity_blocks)

    def worker_restarted(self, worker: Worker) -> None:
        """The worker's engine lost its cache (restart, or down long enough to doubt it)."""
        if self.registered(worker):
            self.index.clear_worker(worker.slot)
            if worker.events is not None:
                worker.events.engine_lost()

    # -- routing -----------------------------------------------------------------------
    def seed(self, namespace: str) -> int:
        return root_seed(namespace)

    def keys(self, token_bytes: bytes, namespace: str = "") -> bytes:
        return block_keys(token_bytes, self.block_size, self.seed(namespace))

    def cached_tokens(self, keys: bytes, prompt_tokens: int) -> dict[int, int]:
        """Per worker slot, the prompt tokens the engine would serve from cache.

        Engines reuse whole blocks and always recompute the last prompt token, so a hit
        is capped at ``floor((n − 1) / block_size)`` blocks.
        """
        cap = max(prompt_tokens - 1, 0) // self.block_size
        bs = self.block_size
        return {slot: min(blocks, cap) * bs for slot, blocks in self.index.match(keys).items()}

    def route(self, keys: bytes, prompt_tokens: int, max_tokens: int, *,
              affinity_key: str | None = None, first_token_signal: bool = True,
              exclude: Collection[WorkerId] = (), eligible: Collection[WorkerId] | None = None,
              ) -> Route | None:
        """Choose a worker, claim it, and record the prefix there. ``None``: no worker."""
        view = self.fleet.view()
        self.pins.expire(self.fleet.clock())
        workers = tuple(w for w in view.workers if w.worker_id not in exclude
                        and (eligible is None or w.worker_id in eligible))
        if not workers:
            return None
        self._seq += 1
        session = self._session_slot(affinity_key, workers)
        request = RequestView(prompt_tokens, max_tokens, self._seq, affinity_key, session)
        cached = self.cached_tokens(keys, prompt_tokens)
        decision = self.policy.choose(request, cached, FleetView(workers, view.utilization),
                                      self.rng)
        worker = self.fleet.get(decision.worker.worker_id)
        assert worker is not None
        if affinity_key is not None:
            self.sessions.set(affinity_key, worker.id)
        ticket = self.fleet.admit(worker, prompt_tokens, decision.cached_tokens, max_tokens,
                                  first_token_signal=first_token_signal)
        pin = None
        if self.speculates(worker):
            # Pinned until it finishes: the engine cannot evict what a running request
            # uses, and a queued one is about to use it. (Pinning only from the first
            # token was measured worse: under overload the mirror then drops prefixes
            # queued requests are about to compute and reuse.)
            pin = self.index.insert(worker.slot, keys, pin=True)
        return Route(worker, decision, ticket, keys, pin)

    def speculates(self, worker: Worker) -> bool:
        """Record routing decisions in the index? Always, except in precise mode for a
        worker whose KV events are live (its events alone then say what it holds)."""
        return self.mode != "precise" or worker.events is None or not worker.events.live

    def _session_slot(self, key: str | None, workers: tuple[WorkerView, ...]) -> int | None:
        worker_id = self.sessions.get(key) if key is not None else None
        return next((w.slot for w in workers if w.worker_id == worker_id), None)

    def keep(self, route: Route, blocks: int, ttl_s: float) -> None:
        """Hold the first ``blocks`` of the request's prefix on its worker for ``ttl_s``."""
        if blocks > 0 and self.registered(route.worker):
            self.pins.hold(route.worker.slot, route.keys[:blocks * 8],
                           self.fleet.clock() + ttl_s)

    def first_token(self, route: Route) -> None:
        """The request produced its first token: correct the worker's queue prediction."""
        self.fleet.first_token(route.ticket)

    def finish(self, route: Route, ok: bool = True) -> None:
        """The request is over: free its claim and unpin its prefix, which becomes the most
        recently used on that worker, as when an engine frees a request's blocks."""
        self.fleet.release(route.ticket, ok)
        if route.pin is not None:
            self.index.unpin(route.pin)
