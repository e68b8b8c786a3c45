"""EventHub: the gateway's KV-event subscriptions, one per worker that publishes events.

Index modes (``--index-mode``):
  approximate  the index learns only from the gateway's own routing decisions
  precise      workers with live events are indexed from their events alone
  hybrid       (default) routing inserts speculatively (and pins while running), events
               confirm, add and remove blocks, and detect restarts
A worker without events, or whose subscription broke, is always routed approximately.
"""

from __future__ import annotations

import asyncio
import contextlib

import zmq.asyncio

from gateway.fleet import Worker
from gateway.index.ingest import EventIngest
from gateway.index.subscriber import EventSource, KVEventSubscriber
from gateway.router import Router

MODES = ("approximate", "precise", "hybrid")


class EventHub:
    def __init__(self, router: Router, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"index mode must be one of {MODES}")
        self.router = router
        self.mode = mode
        self._context: zmq.asyncio.Context | None = None
        self._subs: dict[str, tuple[KVEventSubscriber, asyncio.Task]] = {}

    @property
    def enabled(self) -> bool:
        return self.mode != "approximate"

    def start(self, worker: Worker, source: EventSource, model: str) -> None:
        if not self.enabled or worker.id in self._subs:
            return
        if self._context is None:
            self._context = zmq.asyncio.Context()
        router = self.router
        ingest = EventIngest(router.index, worker.slot, router.block_size,
                             lambda salt: router.seed(f"{model}\x00{salt or ''}"))
        sub = KVEventSubscriber(worker.id, source, ingest, self._context)
        worker.events = sub
        self._subs[worker.id] = (sub, asyncio.create_task(sub.run(), name=f"kv@{worker.id}"))

    async def stop(self, worker_id: str) -> None:
        entry = self._subs.pop(worker_id, None)
        if entry is not None:
            entry[1].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entry[1]

    async def close(self) -> None:
        for worker_id in list(self._subs):
            await self.stop(worker_id)
        if self._context is not None:
            self._context.term()
