"""KVEventSubscriber: one worker's KV-event stream, kept gap-free, applied in order.

    SUB connects to the engine's PUB (which binds)   frames [topic, seq, payload]
    seq == last + 1     apply
    seq >  last + 1     gap: ask the engine's replay socket for last+1 .. seq-1 first
    seq <= last         the engine restarted (seq starts at 0 per process): its cache is
                        gone, so the worker's index entries are dropped, then apply
    first message       replay from 0 what the engine still buffers, then apply

A subscription that cannot be established or breaks leaves the worker ``degraded``: the
gateway then routes it on its own (approximate) accounting, visibly (``/admin/workers``,
metrics), and keeps retrying. All index mutations happen on the event loop, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import zmq
import zmq.asyncio

from gateway.index.events import (
    EventBatch,
    decode_frames,
    decode_replay_reply,
    replay_request,
)
from gateway.index.ingest import EventIngest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventSource:
    endpoint: str
    replay_endpoint: str | None = None
    topic: str = ""
    bind: bool = False
    """True when the engine's PUB connects to us (its endpoint names an address, not ``*``)."""

    @classmethod
    def from_engine(cls, config: dict, worker_host: str) -> EventSource | None:
        """From an engine's advertised publisher config (vLLM ``/kv_event_sources`` entry,
        SGLang ``kv_events_config``): a wildcard endpoint is one the engine binds, so the
        gateway connects to the worker's host; an explicit one is where the engine
        connects to, so the gateway binds there."""
        endpoint = config.get("endpoint")
        if config.get("publisher", "zmq") != "zmq" or not isinstance(endpoint, str):
            return None
        if config.get("enable_kv_cache_events") is False:
            return None
        wildcard = any(w in endpoint for w in ("*", "0.0.0.0", "[::]"))

        def local(url: str | None) -> str | None:
            if not url:
                return None
            for w in ("*", "0.0.0.0", "[::]"):
                url = url.replace(w, worker_host)
            return url

        return cls(local(endpoint), local(config.get("replay_endpoint")),
                   str(config.get("topic") or ""), bind=not wildcard)


class KVEventSubscriber:
    def __init__(self, worker_id: str, source: EventSource, ingest: EventIngest,
                 context: zmq.asyncio.Context, *, silence_s: float = 30.0,
                 retry_s: float = 2.0) -> None:
        self.worker_id = worker_id
        self.source = source
        self.ingest = ingest
        self.context = context
        self.silence_s = silence_s
        self.retry_s = retry_s
        self.state = "connecting"
        self.last_seq: int | None = None
        self.batches = 0
        self.replays = 0
        self.restarts = 0
        self.errors = 0

    @property
    def live(self) -> bool:
        return self.state == "live"

    async def run(self) -> None:
        while True:
            try:
                await self._subscribe()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: route this worker approximately, retry
                self.errors += 1
                self.state = "degraded"
                log.warning("worker %s: KV events unavailable (%s); routing it approximately",
                            self.worker_id, exc)
            await asyncio.sleep(self.retry_s)

    async def _subscribe(self) -> None:
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, self.source.topic.encode())
        if self.source.bind:
            sub.bind(self.source.endpoint)
        else:
            sub.connect(self.source.endpoint)
        if await self._reachable():
            self.state = "live"  # an idle engine publishes nothing: its replay socket answers
        try:
            while True:
                if not await sub.poll(self.silence_s * 1000):
                    continue  # an idle engine publishes nothing; the link may still be fine
                _, seq, batch = decode_frames(await sub.recv_multipart())
                await self.receive(seq, batch)
        finally:
            sub.close()

    def engine_lost(self) -> None:
        """The gateway saw the engine come back (health): forget its sequence and hashes;
        if it did not in fact restart, the next batch's gap replays what it still holds."""
        self.restarts += 1
        self.last_seq = None
        self.ingest.reset()

    async def receive(self, seq: int, batch: EventBatch) -> None:
        """One live batch, in the order the engine sent it."""
        last = self.last_seq
        if last is not None and seq <= last:
            self.restarts += 1
            log.warning("worker %s restarted (event seq %d after %d): dropping its entries",
                        self.worker_id, seq, last)
            self.ingest.reset()
            last = None
        if (last is None and seq > 0) or (last is not None and seq > last + 1):
            await self._replay(0 if last is None else last + 1, seq)
        self._apply(seq, batch)
        self.state = "live"

    def _apply(self, seq: int, batch: EventBatch) -> None:
        self.ingest.apply(batch)
        self.last_seq = seq
        self.batches += 1

    async def _reachable(self, timeout_s: float = 5.0) -> bool:
        """Ask the replay socket for batches from far in the future: the bare end marker
        proves the engine is there, without re-reading anything."""
        if not self.source.replay_endpoint:
            return False
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.source.replay_endpoint)
        try:
            await dealer.send_multipart(replay_request(1 << 62))
            return bool(await dealer.poll(timeout_s * 1000))
        finally:
            dealer.close()

    async def _replay(self, start: int, upto: int, timeout_s: float = 5.0) -> None:
        """Fetch the batches [start, upto) the engine still buffers."""
        if not self.source.replay_endpoint:
            return
        self.replays += 1
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.source.replay_endpoint)
        try:
            await dealer.send_multipart(replay_request(start))
            while await dealer.poll(timeout_s * 1000):
                reply = decode_replay_reply(await dealer.recv_multipart())
                if reply is None:
                    return
                seq, batch = reply
                if seq >= upto:
                    return
                if self.last_seq is None or seq > self.last_seq:
                    self._apply(seq, batch)
            log.warning("worker %s: replay from %d timed out", self.worker_id, start)
        finally:
            with contextlib.suppress(zmq.ZMQError):
                dealer.close()
