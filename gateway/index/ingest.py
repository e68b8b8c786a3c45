"""EventIngest: one worker's KV-cache events applied to the prefix index.

The index keys blocks by the gateway's own chained keys (computed from token ids), never by
engine hashes, so it does not depend on an engine's hash algorithm, seed or version. Each
BlockStored carries the token ids of its blocks and its parent's engine hash; the parent's
key (from this worker's map engine hash → key) seeds the chain, as the gateway's router
would have. Engine blocks may be a whole multiple of the gateway's block size (vLLM on CPU
uses 32): each engine block then maps to several gateway blocks.

Only the GPU tier counts (offloaded tiers are not reused by a prefix hit). Blocks whose
parent is unknown (missed events) cannot be placed and are counted as orphans: a replay or
the next AllBlocksCleared brings the worker back in line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.index.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineHash,
    EventBatch,
)
from gateway.index.keys import KEY_BYTES, block_keys
from gateway.index.prefix import PrefixIndex
from gateway.tokenize import ids_to_bytes

GPU_MEDIA = (None, "GPU", "gpu")


@dataclass
class IngestStats:
    stored: int = 0
    removed: int = 0
    cleared: int = 0
    orphans: int = 0


class EventIngest:
    def __init__(self, index: PrefixIndex, slot: int, block_size: int,
                 seed_for: Callable[[str | None], int]) -> None:
        """``seed_for(salt)`` is the chain seed the router uses for this worker's model."""
        self.index = index
        self.slot = slot
        self.block_size = block_size
        self.seed_for = seed_for
        self.stats = IngestStats()
        self._blocks: dict[EngineHash, tuple[bytes, bytes]] = {}
        """engine hash → (first, last) gateway key of that engine block"""

    def reset(self) -> None:
        """The engine lost its cache (restart, or AllBlocksCleared)."""
        self._blocks.clear()
        self.index.clear_worker(self.slot)

    def apply(self, batch: EventBatch) -> None:
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._stored(event)
            elif isinstance(event, BlockRemoved):
                self._removed(event)
            elif isinstance(event, AllBlocksCleared):
                self.stats.cleared += 1
                self.reset()

    def _stored(self, event: BlockStored) -> None:
        if event.medium not in GPU_MEDIA or not event.block_hashes:
            return
        n = len(event.block_hashes)
        if event.block_size % self.block_size or len(event.token_ids) != n * event.block_size:
            self.stats.orphans += n  # engine blocks finer than ours cannot be keyed
            return
        parent = None
        if event.parent_block_hash is not None:
            known = self._blocks.get(event.parent_block_hash)
            if known is None:
                self.stats.orphans += n
                return
            parent = known[1]
        seed = (int.from_bytes(parent, "little") if parent is not None
                else self.seed_for(_salt(event)))
        keys = block_keys(ids_to_bytes(event.token_ids), self.block_size, seed)
        if not self.index.insert_after(self.slot, parent, keys):
            self.stats.orphans += n
            return
        per = event.block_size // self.block_size * KEY_BYTES
        for j, engine_hash in enumerate(event.block_hashes):
            run = keys[j * per:(j + 1) * per]
            self._blocks[engine_hash] = (run[:KEY_BYTES], run[-KEY_BYTES:])
        self.stats.stored += n

    def _removed(self, event: BlockRemoved) -> None:
        if event.medium not in GPU_MEDIA:
            return
        for engine_hash in event.block_hashes:
            known = self._blocks.pop(engine_hash, None)
            if known is not None:
                self.index.remove_from(self.slot, known[0])
                self.stats.removed += 1


def _salt(event: BlockStored) -> str | None:
    """A cache salt rides on the chain's first block: SGLang names it, vLLM puts it
    (untagged) in the first block's extra keys."""
    if event.cache_salt:
        return event.cache_salt
    extra = event.extra_keys
    if extra and extra[0]:
        first = extra[0]
        if isinstance(first, (list, tuple)) and first and isinstance(first[0], str):
            return first[0]
        if isinstance(first, str):
            return first
    return None
