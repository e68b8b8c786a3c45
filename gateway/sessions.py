"""Client hints that outlive one request: sessions and timed pins.

* :class:`SessionTable`: the worker each affinity key (``prompt_cache_key``, ``user``,
  ``x-session-id``, Anthropic ``metadata.user_id``) was last routed to. Bounded LRU.
* :class:`TimedPins`: prefixes a client asked to keep (Anthropic ``cache_control``), held
  in the index until their TTL runs out; a repeat of the same breakpoint extends it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict

from gateway.index.prefix import Pin, PrefixIndex
from gateway.policy.base import WorkerId


class SessionTable:
    def __init__(self, max_sessions: int = 100_000) -> None:
        self._sessions: OrderedDict[str, WorkerId] = OrderedDict()
        self._max = max_sessions

    def get(self, key: str) -> WorkerId | None:
        worker = self._sessions.get(key)
        if worker is not None:
            self._sessions.move_to_end(key)
        return worker

    def set(self, key: str, worker: WorkerId) -> None:
        self._sessions[key] = worker
        self._sessions.move_to_end(key)
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)

    def __len__(self) -> int:
        return len(self._sessions)


class TimedPins:
    def __init__(self, index: PrefixIndex) -> None:
        self.index = index
        self._expiry: dict[tuple[int, bytes], tuple[float, Pin]] = {}
        self._heap: list[tuple[float, int, tuple[int, bytes]]] = []
        self._seq = itertools.count()

    def hold(self, slot: int, keys: bytes, until: float) -> None:
        """Pin ``keys`` on ``slot`` until ``until`` (extending an existing hold)."""
        if not keys:
            return
        name = (slot, keys[-8:] + len(keys).to_bytes(4, "little"))
        held = self._expiry.get(name)
        if held is not None and held[1].node is not None:
            if until > held[0]:
                self._expiry[name] = (until, held[1])
                heapq.heappush(self._heap, (until, next(self._seq), name))
            return
        pin = self.index.insert(slot, keys, pin=True)
        if pin is not None:
            self._expiry[name] = (until, pin)
            heapq.heappush(self._heap, (until, next(self._seq), name))

    def expire(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            _, _, name = heapq.heappop(self._heap)
            held = self._expiry.get(name)
            if held is not None and held[0] <= now:
                del self._expiry[name]
                self.index.unpin(held[1])

    def __len__(self) -> int:
        return len(self._expiry)
