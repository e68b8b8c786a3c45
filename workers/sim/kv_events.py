"""KV-cache event publisher for the simulated engine, wire-compatible with vLLM 0.32 and SGLang.

Why: the gateway's index learns what each worker caches from the engine's ZMQ event stream.
For the simulator to exercise exactly the code paths a real fleet does (decoders, hash
chaining, seq gaps, replay), it must publish what the engine would, byte for byte:

* PUB multipart ``[topic, seq (8 B big-endian, from 0 per process), payload]``, payload the
  msgpack array ``[ts, events, 0]``; events are maps tagged by ``"type"`` in the engine's
  field order. msgspec encodes Python ints >= 2^32 as uint64 (``0xcf``), as vLLM does, so
  hashes >= 2^63 survive; SGLang's signed hashes go out as int64 where negative.
* The last ``buffer_batches`` batches are kept for a ROUTER at ``replay_endpoint``: a
  DEALER sends ``[b"", start_seq]`` and gets ``[b"", topic, seq, payload]`` per buffered
  batch >= start, then the end marker ``[b"", b"", ff*8, b""]``.

The model names blocks by its own xxh3 chain (namespaced per salt). Those names mean nothing
to a gateway that recomputes engine hashes, so this module recomputes the *engine's* hash of
every stored block from its token ids and keeps ``model hash -> (digest, engine hash)``:
the full digest is what the next block chains from, the engine hash is what a later
BlockRemoved must name. Removed entries stay in a bounded LRU so that a block whose parent
was evicted meanwhile (a concurrent duplicate, see ``BlockPool.cache``) still chains.

Salt: vLLM hashes ``("cache_salt", salt)`` into block 0 and sends ``[salt]`` in its
``extra_keys``; the pool listener does not carry the salt, so pass ``salt_of`` (model hash
of a request's block 0 -> salt or None). Without it every block is published unsalted. The
SGLang flavour always hashes unsalted: how SGLang folds a salt in is not in our references.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec
import zmq
import zmq.asyncio

from gateway.index.events import (
    VLLM_NONE_SEED,
    sglang_event_hash,
    sglang_page_digests,
    vllm_block_digests,
    vllm_event_hash,
)

Flavor = Literal["vllm", "sglang"]
SaltLookup = Callable[[int], str | None]
"""Model hash of a request's first block -> that request's cache_salt (or None)."""

END_SEQ = b"\xff" * 8
"""Replay end marker's seq frame: -1 as signed 8-byte big-endian."""

_log = logging.getLogger(__name__)
_Entry = tuple[bytes, int]  # (engine digest, engine hash as published)
_Item = tuple[int, int | None, bytes]  # BlockPool "stored" item: (hash, parent, token bytes)


class KVEventPublisher:
    """Turns BlockPool callbacks into per-step engine event batches on ZMQ, with replay.

    Use ``on_pool_event`` as the pool listener, ``flush()`` after every engine step, and
    ``start()`` once on the running loop to serve replay. Sends never block: PUB drops at
    its high-water mark rather than stall the engine loop, as the real engines do.
    """

    def __init__(
        self,
        flavor: Flavor,
        endpoint: str,
        replay_endpoint: str | None,
        topic: str,
        block_size: int,
        buffer_batches: int = 10000,
        *,
        connect: bool = False,
        salt_of: SaltLookup | None = None,
        hash_seed: str = VLLM_NONE_SEED,
        retired_capacity: int = 65536,
        replay_timeout: float = 30.0,
    ) -> None:
        """Bind (or with ``connect=True`` connect) the PUB, and bind the replay ROUTER.

        vLLM binds only for ``*``/``::`` endpoints and otherwise connects to a gateway's SUB;
        here binding is the default for any endpoint (``tcp://127.0.0.1:*`` picks a free
        port, see :attr:`endpoint`) because tests and the sim own their ports.
        """
        if flavor not in ("vllm", "sglang"):
            raise ValueError(f"unknown flavor {flavor!r}")
        if block_size <= 0 or buffer_batches <= 0:
            raise ValueError("block_size and buffer_batches must be positive")
        self.flavor: Flavor = flavor
        self.topic = topic
        self.block_size = block_size
        self.replay_timeout = replay_timeout
        self._topic = topic.encode()
        self._salt_of = salt_of
        self._seed = hash_seed
        self._seq = 0
        self._pending: list[dict[str, Any]] = []
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_batches)
        self._live: dict[int, _Entry] = {}
        self._retired: OrderedDict[int, _Entry] = OrderedDict()
        self._retired_capacity = retired_capacity
        self._encoder = msgspec.msgpack.Encoder()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, 100_000)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._router: zmq.asyncio.Socket | None = None
        try:
            (self._pub.connect if connect else self._pub.bind)(endpoint)
            if replay_endpoint is not None:
                actx = zmq.asyncio.Context.shadow(self._ctx.underlying)
                self._router = actx.socket(zmq.ROUTER)
                self._router.setsockopt(zmq.LINGER, 0)
                self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # full/gone peer: error, no drop
                self._router.bind(replay_endpoint)
        except zmq.ZMQError:
            self.close()
            raise

    # -- addresses and state ---------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """The PUB's resolved address (the real port when bound to ``:*``)."""
        return self._pub.getsockopt(zmq.LAST_ENDPOINT).decode()

    @property
    def replay_address(self) -> str | None:
        """The replay ROUTER's resolved address, or None without replay."""
        if self._router is None:
            return None
        return self._router.getsockopt(zmq.LAST_ENDPOINT).decode()

    @property
    def next_seq(self) -> int:
        """Seq the next published batch will carry."""
        return self._seq

    @property
    def pending_events(self) -> int:
        """Events accumulated since the last flush."""
        return len(self._pending)

    # -- pool listener -----------------------------------------------------------------
    def on_pool_event(self, kind: str, items: Sequence[Any]) -> None:
        """BlockPool listener: translate one callback into engine events for this step.

        Cheap and synchronous (hashing only), since the model calls it inside ``step``.
        """
        if kind == "stored":
            if self.flavor == "vllm":
                for run in _runs(items):
                    self._store_vllm(run)
            else:
                for item in items:
                    self._store_sglang(item)
        elif kind == "removed":
            for h in items:
                self._remove(h)
        elif kind == "cleared":
            # Queued, so it leads the next step's batch: vLLM defers it the same way.
            self._pending.append({"type": "AllBlocksCleared"})
            self._live.clear()
            self._retired.clear()
        else:
            raise ValueError(f"unknown pool event kind {kind!r}")

    def _parent(self, parent: int) -> _Entry | None:
        """A parent's (digest, engine hash), also when it was evicted since (retired LRU)."""
        entry = self._live.get(parent)
        return entry if entry is not None else self._retired.get(parent)

    def _store_vllm(self, run: list[_Item]) -> None:
        root, parent = run[0][0], run[0][1]
        parent_entry = None if parent is None else self._parent(parent)
        if parent is not None and parent_entry is None:
            _log.warning("kv events: parent of %d unknown; %d blocks not announced", root, len(run))
            return
        salt = self._salt_of(root) if parent is None and self._salt_of is not None else None
        tokens = _token_ids(b"".join(item[2] for item in run))
        digests = vllm_block_digests(tokens, self.block_size, salt=salt, seed=self._seed,
                                     parent=None if parent_entry is None else parent_entry[0])
        if len(digests) != len(run):
            raise ValueError("stored blocks must be full blocks of block_size tokens")
        hashes = [int(vllm_event_hash(d)) for d in digests]
        for item, digest, h in zip(run, digests, hashes, strict=True):
            self._live[item[0]] = (digest, h)
        extra: list[Any] = [None] * len(run)
        if salt is not None:
            extra[0] = [salt]  # untagged on the wire, tagged in the hash (block 0 only)
        self._pending.append({
            "type": "BlockStored",
            "block_hashes": hashes,
            "parent_block_hash": None if parent_entry is None else parent_entry[1],
            "token_ids": list(tokens),
            "block_size": self.block_size,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            "extra_keys": extra,
            "group_idx": 0,
            "kv_cache_spec_kind": "full_attention",
        })

    def _store_sglang(self, item: _Item) -> None:
        h_model, parent, data = item
        parent_entry = None if parent is None else self._parent(parent)
        if parent is not None and parent_entry is None:
            _log.warning("kv events: parent of %d unknown; page not announced", h_model)
            return
        tokens = _token_ids(data)
        digests = sglang_page_digests(tokens, self.block_size,
                                      b"" if parent_entry is None else parent_entry[0])
        if len(digests) != 1 or len(tokens) != self.block_size:
            raise ValueError("a stored page must hold exactly block_size tokens")
        h = int(sglang_event_hash(digests[0]))
        self._live[h_model] = (digests[0], h)
        self._pending.append({
            "type": "BlockStored",
            "block_hashes": [h],
            "parent_block_hash": None if parent_entry is None else parent_entry[1],
            "token_ids": list(tokens),
            "block_size": self.block_size,
            "lora_id": None,
            "medium": "GPU",
        })

    def _remove(self, h_model: int) -> None:
        entry = self._live.pop(h_model, None)
        if entry is None:  # never announced (e.g. its parent was unknown): nothing to retract
            return
        self._retired[h_model] = entry
        if len(self._retired) > self._retired_capacity:
            self._retired.popitem(last=False)
        event: dict[str, Any] = {"type": "BlockRemoved", "block_hashes": [entry[1]],
                                 "medium": "GPU"}
        if self.flavor == "vllm":
            event["group_idx"] = 0
        self._pending.append(event)

    # -- publishing --------------------------------------------------------------------
    def flush(self) -> int | None:
        """Publish the events of the step just taken as one batch; return its seq.

        Returns None (and publishes nothing) when the step produced no events, as engines
        publish only non-empty batches.
        """
        if not self._pending:
            return None
        payload = self._encoder.encode([time.time(), self._pending, 0])
        self._pending = []
        seq = self._seq
        self._seq += 1
        self._buffer.append((seq, payload))
        try:
            self._pub.send_multipart([self._topic, seq.to_bytes(8, "big"), payload],
                                     flags=zmq.NOBLOCK)
        except zmq.Again:
            _log.warning("kv events: PUB queue full, batch %d dropped (replay keeps it)", seq)
        return seq

    # -- replay ------------------------------------------------------------------------
    def start(self) -> None:
        """Serve replay requests; call once from the running event loop."""
        if self._router is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._serve_replay(self._router), name="kv-events-replay")

    async def _serve_replay(self, router: zmq.asyncio.Socket) -> None:
        while True:
            frames = await router.recv_multipart()
            if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
                _log.warning("kv events: malformed replay request (%d frames)", len(frames))
                continue
            start = int.from_bytes(frames[2], "big")
            # Snapshot first: flush() may rotate the buffer while we await sends.
            backlog = [(s, p) for s, p in self._buffer if s >= start]
            try:
                await asyncio.wait_for(self._reply(router, frames[0], backlog),
                                       self.replay_timeout)
            except (TimeoutError, zmq.ZMQError) as exc:
                _log.warning("kv events: replay to a peer abandoned: %s", exc)

    async def _reply(self, router: zmq.asyncio.Socket, ident: bytes,
                     backlog: list[tuple[int, bytes]]) -> None:
        for seq, payload in backlog:
            await router.send_multipart([ident, b"", self._topic, seq.to_bytes(8, "big"),
                                         payload])
        await router.send_multipart([ident, b"", b"", END_SEQ, b""])

    # -- shutdown ----------------------------------------------------------------------
    async def aclose(self) -> None:
        """Stop serving replay, wait for that task, then close the sockets."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.close()

    def close(self) -> None:
        """Close the sockets without waiting (linger 0); prefer ``aclose`` on a loop."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._router is not None:
            self._router.close(0)
        self._pub.close(0)
        self._ctx.term()


def _runs(items: Sequence[_Item]) -> list[list[_Item]]:
    """Split stored items into chains: an item whose parent is the previous item extends it.

    vLLM announces each run of consecutive blocks as one BlockStored; the pool skips blocks
    another request already stored, which breaks a run.
    """
    runs: list[list[_Item]] = []
    for item in items:
        if runs and item[1] is not None and item[1] == runs[-1][-1][0]:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _token_ids(data: bytes) -> tuple[int, ...]:
    """Token ids from the model's uint32 little-endian bytes."""
    if len(data) % 4:
        raise ValueError("token bytes must be a whole number of uint32")
    return struct.unpack(f"<{len(data) // 4}I", data)
