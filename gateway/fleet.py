"""Fleet: the workers behind the gateway, their health, and the gateway's load accounting.

Every admitted request holds a :class:`Ticket` until it finishes. From the tickets the
fleet keeps, per worker:

* ``in_flight`` requests, ``prefilling`` (no first token yet), ``active_tokens`` (KV the
  in-flight requests occupy: prompt + expected output);
* a virtual-finish-time queue of prefill work: ``busy_until`` advances by each admitted
  request's predicted prefill time, so ``backlog = busy_until − now`` needs no polling and
  drains by itself as time passes. Observed first tokens correct it: a request that starts
  late (early) shifts the whole worker's queue by its error, once (``offset`` keeps
  corrections from being counted twice);
* fleet ``utilization``: the fraction of workers with a prefill waiting (a request without
  its first token yet), time-averaged with exponential decay over ``window_s``. This is the
  busy fraction of the engines' prefill "server" as requests experience it, decode
  interference and engine slowness included, with no model of engine capacity needed.

The clock is injected, so the same accounting runs on wall time in the gateway and on
virtual time in the load-test simulator. State lives in this object only (no globals): a
shared store can back it later behind the same methods.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.base import FleetView, WorkerId, WorkerView
from gateway.policy.timing import EngineTiming


@dataclass(eq=False)
class Worker:
    id: WorkerId
    url: str
    slot: int
    capacity_blocks: int
    max_running: int = 256
    healthy: bool = True
    failures: int = 0
    in_flight: int = 0
    prefilling: int = 0
    active_tokens: int = 0
    busy_until: float = 0.0
    offset: float = 0.0
    requests_total: int = 0
    errors_total: int = 0
    models: dict[str, int | None] = field(default_factory=dict)
    """Models the engine serves (``/v1/models``) → its context length, when it says."""
    events: Any = None
    """Its KV-event subscription (``gateway.index.subscriber.KVEventSubscriber``), if any."""
    external_waiting: int = 0
    """Requests queued in the engine beyond the gateway's own, at the last scrape (another
    gateway's, or sent to the engine directly)."""
    engine_kv_usage: float = 0.0
    capacity_from_engine: bool = False
    _queue: list[tuple[float, int, Ticket]] = field(default_factory=list, repr=False)


@dataclass(eq=False, slots=True)
class Ticket:
    """One admitted request's claim on a worker, from admission until release."""

    worker: Worker
    prompt_tokens: int
    cached_tokens: int
    max_tokens: int
    prefill_s: float
    base_first_token: float
    """Predicted first-token time minus the worker's correction offset at admission."""
    prefilling: bool = True
    released: bool = False


class Fleet:
    def __init__(self, block_size: int, timing: EngineTiming | None = None,
                 clock: Callable[[], float] = time.monotonic, window_s: float = 20.0) -> None:
        self.block_size = block_size
        self.timing = timing or EngineTiming()
        self.clock = clock
        self.window_s = window_s
        self._workers: dict[WorkerId, Worker] = {}
        self._mean_prefill_s = 0.0  # recent prefill per request: prices queues we cannot see
        self._busy = 0  # workers with at least one request waiting for its first token
        self._busy_area = 0.0
        self._busy_at = clock()
        self._ids = itertools.count()

    # -- membership and health ---------------------------------------------------------
    def add_worker(self, worker_id: str, url: str, capacity_blocks: int,
                   max_running: int = 256) -> Worker:
        if worker_id in self._workers:
            raise ValueError(f"worker {worker_id!r} is already registered")
        used = {w.slot for w in self._workers.values()}
        slot = next(s for s in itertools.count() if s not in used)
        worker = Worker(WorkerId(worker_id), url.rstrip("/"), slot, capacity_blocks, max_running)
        self._workers[worker.id] = worker
        return worker

    def remove_worker(self, worker_id: str) -> Worker | None:
        return self._workers.pop(WorkerId(worker_id), None)

    def get(self, worker_id: str) -> Worker | None:
        return self._workers.get(WorkerId(worker_id))

    @property
    def workers(self) -> list[Worker]:
        return list(self._workers.values())

    def healthy(self) -> list[Worker]:
        return [w for w in self._workers.values() if w.healthy]

    def mark(self, worker: Worker, ok: bool, fail_threshold: int = 1) -> bool:
        """Record a health observation; returns True when the worker changed state."""
        if ok:
            worker.failures = 0
            changed, worker.healthy = not worker.healthy, True
            return changed
        worker.failures += 1
        if worker.healthy and worker.failures >= fail_threshold:
            worker.healthy = False
            return True
        return False

    # -- accounting --------------------------------------------------------------------
    def admit(self, worker: Worker, prompt_tokens: int, cached_tokens: int, max_tokens: int,
              *, first_token_signal: bool = True) -> Ticket:
        """Claim ``worker`` for a request. Without a ``first_token_signal`` (a non-streamed
        response), the request counts as prefilling until its predicted first token."""
        now = self.clock()
        prefill_s = self.timing.queued_prefill_s(prompt_tokens - cached_tokens,
                                                 queue_empty=worker.busy_until <= now)
        worker.busy_until = max(worker.busy_until, now) + prefill_s
        self._mean_prefill_s += 0.05 * (prefill_s - self._mean_prefill_s)
        ticket = Ticket(worker, prompt_tokens, cached_tokens, max_tokens, prefill_s,
                        worker.busy_until - worker.offset)
        if not first_token_signal:
            heapq.heappush(worker._queue, (ticket.base_first_token, next(self._ids), ticket))
        worker.in_flight += 1
        self._prefilling(worker, +1, now)
        worker.active_tokens += prompt_tokens + max_tokens
        worker.requests_total += 1
        return ticket

    def first_token(self, ticket: Ticket) -> None:
        """The engine produced the first token: correct the worker's queue prediction."""
        if not ticket.prefilling or ticket.released:
            return
        worker, now = ticket.worker, self.clock()
        error = now - (ticket.base_first_token + worker.offset)
        worker.offset += error
        worker.busy_until = max(worker.busy_until + error, now)
        self._end_prefill(ticket, now)

    def release(self, ticket: Ticket, ok: bool = True) -> None:
        """The request finished (or failed, or was cancelled): free its claim."""
        if ticket.released:
            return
        worker, now = ticket.worker, self.clock()
        if ticket.prefilling:
            # It left before its predicted prefill ended: its unfinished work leaves too.
            remaining = ticket.base_first_token + worker.offset - now
            if remaining > 0:
                worker.busy_until -= min(remaining, ticket.prefill_s)
            self._end_prefill(ticket, now)
        ticket.released = True
        worker.in_flight -= 1
        worker.active_tokens -= ticket.prompt_tokens + ticket.max_tokens
        if not ok:
            worker.errors_total += 1

    def _end_prefill(self, ticket: Ticket, now: float) -> None:
        ticket.prefilling = False
        self._prefilling(ticket.worker, -1, now)

    def _prefilling(self, worker: Worker, delta: int, now: float) -> None:
        was_busy = worker.prefilling > 0
        worker.prefilling += delta
        if was_busy != (worker.prefilling > 0):
            self._advance_busy(now)
            self._busy += 1 if delta > 0 else -1

    def _advance_busy(self, now: float) -> None:
        """Exponentially weighted integral of the busy-worker count up to ``now``."""
        decay = math.exp(-max(now - self._busy_at, 0.0) / self.window_s)
        self._busy_area = self._busy_area * decay + self._busy * self.window_s * (1 - decay)
        self._busy_at = max(now, self._busy_at)

    def _expire_prefills(self, worker: Worker, now: float) -> None:
        """Requests without a first-token signal start decoding when predicted to."""
        queue = worker._queue
        while queue and (queue[0][2].released or not queue[0][2].prefilling
                         or queue[0][0] + worker.offset <= now):
            _, _, ticket = heapq.heappop(queue)
            if ticket.prefilling and not ticket.released:
                self._end_prefill(ticket, now)

    def utilization(self, healthy: int | None = None) -> float:
        """Recent fraction of healthy workers with a prefill waiting (0 idle, 1 saturated)."""
        n = len(self.healthy()) if healthy is None else healthy
        if not n:
            return 0.0
        self._advance_busy(self.clock())
        return min(1.0, self._busy_area / self.window_s / n)

    # -- snapshots ---------------------------------------------------------------------
    def view(self) -> FleetView:
        """What a policy sees: every healthy worker's load at this instant."""
        now = self.clock()
        views = []
        for w in self.healthy():
            self._expire_prefills(w, now)
            # Requests the engine holds beyond the gateway's own queue up too, at a
            # typical prefill each.
            unseen = w.external_waiting * self._mean_prefill_s
            capacity = w.capacity_blocks * self.block_size
            views.append(WorkerView(
                slot=w.slot, worker_id=w.id, in_flight=w.in_flight, prefilling=w.prefilling,
                backlog_s=max(0.0, w.busy_until - now) + unseen,
                active_tokens=max(w.active_tokens, int(w.engine_kv_usage * capacity)),
                capacity_tokens=capacity, max_running=w.max_running,
            ))
        return FleetView(tuple(views), self.utilization(len(views)))
