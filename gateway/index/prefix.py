"""PrefixIndex: which worker holds which token prefix.

A radix tree over chained block keys (:mod:`gateway.index.keys`). Each node holds a *run*
of consecutive block keys (8 bytes each, compared with one ``memcmp``), the set of worker
slots that hold the whole run (an int bitmask), and each holder's last-use stamp.

Invariants
  * Uniform runs: a worker holds all of a node's run or none of it (nodes split to keep it).
  * Prefix closure: a worker that holds a node holds its parent. An engine can only reuse a
    cached prefix from block 0 on, so a block behind a hole is useless and is not kept.
  * Capacity mirror: a worker holds at most ``capacity`` blocks. Beyond it, its least
    recently used *leaves* (nodes it holds with no child it holds) are dropped, tail first,
    as an engine's LRU of free blocks drops them. Stamps never decrease down a path
    (a use stamps the whole path), so the oldest leaf is the right victim.
  * A global cap bounds all block-worker entries; past it the fullest worker gives way.
  * Pins: a pinned path (a request still running on the worker, or a prefix a client asked
    to keep) is never evicted, like blocks an engine still references. A pin sits on the
    path's last node; its ancestors are protected because eviction only takes leaves.
    When pinned blocks alone exceed a worker's capacity, the worker may briefly hold more
    than its capacity (the engine would preempt a request then).

Engine events (precise mode) name blocks, not paths: with ``locate=True`` the index also
maps every block key to its node, so a block stored after a known parent
(:meth:`insert_after`) or removed by the engine (:meth:`remove_from`) is found in O(1).
That map costs about 100 bytes per distinct block; approximate mode goes without it.

Costs: ``match`` and ``insert`` walk one path: O(nodes on the path) dict lookups and run
compares, independent of how much is indexed. Eviction uses one lazy min-heap per worker
(stale entries are skipped on pop): O(log n) per dropped node. Memory: 8 bytes per block
key plus ~0.3 KiB per node, shared by every worker that holds it.

Plain synchronous code with no I/O: one owner (the gateway's event loop, or a simulator)
applies every mutation.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from gateway.index.keys import KEY_BYTES, key_at


class _Node:
    __slots__ = ("children", "holders", "keys", "parent", "pins", "stamps")

    def __init__(self, keys: bytes, parent: _Node | None) -> None:
        self.keys = keys
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.holders = 0
        self.stamps: dict[int, int] = {}
        self.pins: list[Pin] | None = None

    @property
    def length(self) -> int:
        return len(self.keys) // KEY_BYTES

    def pinned_by(self, slot: int) -> bool:
        return bool(self.pins) and any(p.slot == slot for p in self.pins)


class Pin:
    """A hold on one worker's copy of a path; release it with :meth:`PrefixIndex.unpin`."""

    __slots__ = ("node", "slot")

    def __init__(self, node: _Node | None, slot: int) -> None:
        self.node = node
        self.slot = slot


@dataclass(frozen=True, slots=True)
class IndexStats:
    nodes: int
    entries: int
    blocks_by_slot: dict[int, int]


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _common_blocks(run: bytes, keys: bytes, off: int) -> int:
    """Leading blocks shared by ``run`` and ``keys[off:]``, given their first keys match.

    Keys are chained, so once one key differs every later key differs: binary search on
    single-key equality is exact.
    """
    start = off * KEY_BYTES
    seg = keys[start : start + len(run)]
    if seg == run[: len(seg)]:
        return len(seg) // KEY_BYTES
    lo, hi = 1, len(seg) // KEY_BYTES  # key lo-1 equal, key hi-1 differs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        a = (mid - 1) * KEY_BYTES
        if run[a : a + KEY_BYTES] == seg[a : a + KEY_BYTES]:
            lo = mid
        else:
            hi = mid
    return lo


class PrefixIndex:
    """Global radix index of cached prefixes, per worker slot, with a capacity mirror."""

    def __init__(self, max_entries: int = 64 << 20, *, locate: bool = False) -> None:
        self._root = _Node(b"", None)
        self._where: dict[bytes, _Node] | None = {} if locate else None
        self._max_entries = max_entries
        self._capacity: dict[int, int] = {}
        self._blocks: dict[int, int] = {}
        self._heaps: dict[int, list[tuple[int, int, _Node]]] = {}
        self._entries = 0
        self._nodes = 0
        self._all = 0
        self._tick = 0
        self._seq = itertools.count()

    # -- workers -----------------------------------------------------------------------
    def add_worker(self, slot: int, capacity_blocks: int) -> None:
        """Register a worker slot with room for ``capacity_blocks`` cached blocks."""
        self._capacity[slot] = capacity_blocks
        self._blocks.setdefault(slot, 0)
        self._heaps.setdefault(slot, [])
        self._all |= 1 << slot
        self._evict(slot, capacity_blocks)

    def set_capacity(self, slot: int, capacity_blocks: int) -> None:
        self._capacity[slot] = capacity_blocks
        self._evict(slot, capacity_blocks)

    def clear_worker(self, slot: int) -> int:
        """Forget everything ``slot`` holds (its engine restarted). Returns blocks dropped."""
        dropped = self._blocks.get(slot, 0)
        bit = 1 << slot
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.holders & bit:
                stack.extend(node.children.values())
                self._drop(node, slot, push_parent=False)
        self._heaps[slot] = []
        return dropped

    def remove_worker(self, slot: int) -> None:
        """Unregister ``slot`` and forget what it holds."""
        if slot not in self._capacity:
            return
        self.clear_worker(slot)
        self._all &= ~(1 << slot)
        for table in (self._capacity, self._blocks, self._heaps):
            table.pop(slot, None)

    def blocks_held(self, slot: int) -> int:
        return self._blocks.get(slot, 0)

    def stats(self) -> IndexStats:
        return IndexStats(self._nodes, self._entries, dict(self._blocks))

    # -- queries -----------------------------------------------------------------------
    def match(self, keys: bytes) -> dict[int, int]:
        """Matched prefix length in blocks for every slot holding at least one block.

        One walk down the prompt's path: a slot drops out at the first node it lacks.
        """
        n = len(keys) // KEY_BYTES
        matched: dict[int, int] = {}
        node, alive, off = self._root, self._all, 0
        while off < n and alive:
            child = node.children.get(key_at(keys, off))
            if child is None:
                break
            run = _common_blocks(child.keys, keys, off)
            held = alive & child.holders
            if off:
                for slot in _bits(alive & ~held):
                    matched[slot] = off
            alive = held
            off += run
            if run < child.length:
                break
            node = child
        if off:
            for slot in _bits(alive):
                matched[slot] = off
        return matched

    # -- mutations ---------------------------------------------------------------------
    def insert(self, slot: int, keys: bytes, *, pin: bool = False) -> Pin | None:
        """Record that ``slot`` now holds the prefix ``keys`` (and used all of it now).

        With ``pin``, the path stays until :meth:`unpin` (returns the pin)."""
        if slot not in self._capacity:
            raise KeyError(f"unknown worker slot {slot}")
        self._tick += 1
        return self._insert_below(self._root, slot, keys, pin)

    def _insert_below(self, node: _Node, slot: int, keys: bytes, pin: bool) -> Pin | None:
        """Hold ``keys`` on ``slot`` as the continuation of ``node``'s path."""
        n = len(keys) // KEY_BYTES
        off = 0
        while off < n:
            first = key_at(keys, off)
            child = node.children.get(first)
            if child is None:
                child = _Node(keys[off * KEY_BYTES :], node)
                node.children[first] = child
                self._nodes += 1
                self._register(child)
                run = n - off
            else:
                run = _common_blocks(child.keys, keys, off)
                if run < child.length:
                    self._split(child, run)
            self._hold(child, slot)
            off += run
            node = child
        handle = None
        if pin:
            handle = Pin(node if node is not self._root else None, slot)
            if handle.node is not None:
                handle.node.pins = [*(handle.node.pins or ()), handle]
        self._evict(slot, self._capacity[slot])
        self._enforce_global_cap()
        return handle

    def unpin(self, pin: Pin) -> None:
        """Release a pin; the path becomes evictable again (its last use: now)."""
        node = pin.node
        pin.node = None
        if node is None or not node.pins:
            return
        node.pins = [p for p in node.pins if p is not pin] or None
        if node.holders & (1 << pin.slot) and not node.pinned_by(pin.slot):
            self._tick += 1
            node.stamps[pin.slot] = self._tick
            heapq.heappush(self._heaps[pin.slot], (self._tick, next(self._seq), node))
            self._evict(pin.slot, self._capacity[pin.slot])  # pins may have held it over

    def _hold(self, node: _Node, slot: int) -> None:
        bit = 1 << slot
        if not node.holders & bit:
            node.holders |= bit
            self._blocks[slot] += node.length
            self._entries += node.length
        node.stamps[slot] = self._tick
        heapq.heappush(self._heaps[slot], (self._tick, next(self._seq), node))
        self._compact_heap(slot)

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node`` after ``at`` blocks; ``node`` keeps the head, the new tail is returned."""
        cut = at * KEY_BYTES
        tail = _Node(node.keys[cut:], node)
        tail.children = node.children
        for child in tail.children.values():
            child.parent = tail
        tail.holders = node.holders
        tail.stamps = dict(node.stamps)
        tail.pins, node.pins = node.pins, None  # a pin holds the end of its path
        for pin in tail.pins or ():
            pin.node = tail
        node.keys = node.keys[:cut]
        node.children = {key_at(tail.keys, 0): tail}
        self._nodes += 1
        self._register(tail)
        for slot, stamp in tail.stamps.items():
            heapq.heappush(self._heaps[slot], (stamp, next(self._seq), tail))
        return tail

    # -- engine events (locate=True) ------------------------------------------------------
    def _register(self, node: _Node) -> None:
        if self._where is not None:
            keys = node.keys
            for i in range(0, len(keys), KEY_BYTES):
                self._where[keys[i:i + KEY_BYTES]] = node

    def _unregister(self, node: _Node) -> None:
        if self._where is not None:
            keys = node.keys
            for i in range(0, len(keys), KEY_BYTES):
                if self._where.get(keys[i:i + KEY_BYTES]) is node:
                    del self._where[keys[i:i + KEY_BYTES]]

    def _locate(self, key: bytes) -> tuple[_Node, int] | None:
        """The node holding block ``key`` and the block's offset in its run."""
        node = self._where.get(key) if self._where is not None else None
        if node is None:
            return None
        at = node.keys.find(key)
        while at % KEY_BYTES:
            at = node.keys.find(key, at + 1)
        return node, at // KEY_BYTES

    def path_to(self, key: bytes) -> bytes | None:
        """All block keys from the root up to and including ``key``; None if unknown."""
        found = self._locate(key)
        if found is None:
            return None
        node, at = found
        parts = [node.keys[:(at + 1) * KEY_BYTES]]
        node = node.parent
        while node is not None and node is not self._root:
            parts.append(node.keys)
            node = node.parent
        return b"".join(reversed(parts))

    def insert_after(self, slot: int, parent: bytes | None, keys: bytes) -> bool:
        """The engine stored ``keys`` right after block ``parent`` (None: from the start).
        Returns False when the parent is unknown (the blocks cannot be placed)."""
        if parent is None:
            self.insert(slot, keys)
            return True
        found = self._locate(parent)
        if found is None:
            return False
        node, at = found
        if not node.holders & (1 << slot):  # slot lacks the path: hold all of it
            self.insert(slot, self.path_to(parent) + keys)
            return True
        if at + 1 < node.length:
            self._split(node, at + 1)
        self._tick += 1
        self._insert_below(node, slot, keys, pin=False)
        return True

    def remove_from(self, slot: int, key: bytes) -> int:
        """The engine evicted block ``key`` on ``slot``: it and every block after it are
        unusable there (prefix closure). Returns blocks dropped."""
        found = self._locate(key)
        if found is None or not found[0].holders & (1 << slot):
            return 0
        node, at = found
        if at:
            node = self._split(node, at)
        before = self._blocks[slot]
        stack = [node]
        while stack:
            current = stack.pop()
            if current.holders & (1 << slot):
                stack.extend(current.children.values())
                self._drop(current, slot, push_parent=True)
        return before - self._blocks[slot]

    def _evict(self, slot: int, target_blocks: int) -> None:
        """Drop ``slot``'s least recently used leaves until it holds ``target_blocks``."""
        heap, bit = self._heaps[slot], 1 << slot
        while self._blocks[slot] > target_blocks and heap:
            stamp, _, node = heapq.heappop(heap)
            if not node.holders & bit or node.stamps.get(slot) != stamp:
                continue  # stale entry: re-stamped or already dropped
            if any(child.holders & bit for child in node.children.values()):
                continue  # not a leaf for slot; re-pushed once its last child goes
            if node.pinned_by(slot):
                continue  # in use; re-pushed when unpinned
            excess = self._blocks[slot] - target_blocks
            if node.length > excess:
                node = self._split(node, node.length - excess)
            self._drop(node, slot, push_parent=True)

    def _drop(self, node: _Node, slot: int, *, push_parent: bool) -> None:
        bit = 1 << slot
        node.holders &= ~bit
        del node.stamps[slot]
        self._blocks[slot] -= node.length
        self._entries -= node.length
        parent = node.parent
        if node.pins:  # dropped by force (worker cleared): its pins have nothing to hold
            for pin in [p for p in node.pins if p.slot == slot]:
                pin.node = None
            node.pins = [p for p in node.pins if p.slot != slot] or None
        if not node.holders:
            # Prefix closure: nobody holds a child of a node nobody holds.
            del parent.children[key_at(node.keys, 0)]
            node.parent = None
            self._nodes -= 1
            self._unregister(node)
        if (
            push_parent
            and parent is not self._root
            and parent.holders & bit
            and not any(child.holders & bit for child in parent.children.values())
        ):
            heapq.heappush(self._heaps[slot], (parent.stamps[slot], next(self._seq), parent))

    def _enforce_global_cap(self) -> None:
        """Past the global cap, the fullest workers give way; pinned blocks cannot, so
        the loop ends when nobody can free anything."""
        while self._entries > self._max_entries:
            for slot in sorted(self._blocks, key=self._blocks.__getitem__, reverse=True):
                before = self._blocks[slot]
                self._evict(slot, max(0, before - (self._entries - self._max_entries)))
                if self._blocks[slot] < before:
                    break
            else:
                return

    def _compact_heap(self, slot: int) -> None:
        """Rebuild a heap that lazy deletion let grow far past the live entries."""
        heap = self._heaps[slot]
        if len(heap) < 4 * self._nodes + 1024:
            return
        bit = 1 << slot
        live = []
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.holders & bit:
                live.append((node.stamps[slot], next(self._seq), node))
                stack.extend(node.children.values())
        heapq.heapify(live)
        self._heaps[slot] = live
