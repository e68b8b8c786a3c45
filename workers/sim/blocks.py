"""BlockPool: paged KV blocks with a prefix cache, as vLLM's v1 block pool keeps them.

* ``num_blocks`` physical blocks of ``block_size`` tokens. A block is *referenced* while a
  running request uses it and *free* otherwise.
* Free blocks wait in one LRU queue (an insertion-ordered dict: O(1) removal from the
  middle when a cached block is hit again). Allocation takes from the front; a taken block
  that still carried a cached prefix is evicted from the cache then ("BlockRemoved").
* A request frees its blocks tail first, so its last blocks are the first to be evicted:
  a prefix outlives its extensions.
* A full block is cached (named by its chained hash, "BlockStored") as soon as it is
  computed, so concurrent requests share a prefix before the first one finishes.

``listener`` receives ``("stored", [(hash, parent_hash, token_bytes)...])`` and
``("removed", [hash...])``: the KV-event stream an engine would publish.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

EventListener = Callable[[str, list], None]


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int,
                 listener: EventListener | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.listener = listener
        self._refs = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by running requests (vLLM's kv_cache_usage_perc)."""
        return 1.0 - len(self._free) / self.num_blocks

    @property
    def cached_blocks(self) -> int:
        return len(self._cached)

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Blocks of the longest cached prefix of ``hashes``."""
        found = []
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def acquire(self, blocks: Sequence[int]) -> None:
        """Reference cached blocks a new request reuses."""
        for block in blocks:
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks, evicting the least recently freed; ``None`` if too few."""
        if n > len(self._free):
            return None
        taken = []
        removed = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            old = self._hash_of[block]
            if old is not None:
                self._hash_of[block] = None
                del self._cached[old]
                removed.append(old)
            self._refs[block] = 1
            taken.append(block)
        if removed and self.listener:
            self.listener("removed", removed)
        return taken

    def cache(self, blocks: Sequence[int], hashes: Sequence[int], parent: int | None,
              token_bytes: Sequence[bytes]) -> None:
        """Name newly computed full ``blocks`` by their chained ``hashes``."""
        stored = []
        for block, h, tokens in zip(blocks, hashes, token_bytes, strict=True):
            if h in self._cached or self._hash_of[block] is not None:
                parent = h
                continue  # an identical block was computed concurrently: keep the first
            self._cached[h] = block
            self._hash_of[block] = h
            stored.append((h, parent, tokens))
            parent = h
        if stored and self.listener:
            self.listener("stored", stored)

    def free(self, blocks: Sequence[int]) -> None:
        """Release a request's blocks, tail first (its last blocks get evicted first)."""
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None

    def reset(self) -> bool:
        """Drop every cached prefix (only when nothing is running, as vLLM requires)."""
        if len(self._free) != self.num_blocks:
            return False
        self._cached.clear()
        self._hash_of = [None] * self.num_blocks
        if self.listener:
            self.listener("cleared", [])
        return True
