"""Peer routers' published rules as policies, for side-by-side simulation.

sglang_cache_aware: the SGLang router's (and vLLM router's) ``cache_aware`` rule.

    load_w = the router's own in-flight request count
    if max(load) − min(load) > 64 and max(load) > 1.5 · min(load):
        → the least-loaded worker                                     (ties: first worker)
    elif matched / prompt > 0.3:
        → the worker holding the deepest match                        (ties: first worker)
    else:
        → the least-loaded worker                                     (ties: first worker)
    then the whole prompt is recorded under the chosen worker.

Differences from the real router, all in its favour or neutral: it matches raw characters
in a per-worker tree of up to 2^26 characters evicted by a background thread; here it
matches the chat's tokens in 16-token blocks (the same token-level index radixgate uses,
so both see the same prefixes) with a per-worker budget of 2^24 tokens (≈ 2^26 characters
at ~4 characters a token) and immediate LRU eviction.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.policy.base import Decision, FleetView, RequestView, WorkerView

SGLANG_TREE_TOKENS = 1 << 24


@dataclass
class SGLangCacheAwarePolicy:
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    name: str = "sglang_cache_aware"

    def choose(self, request: RequestView, cached: Mapping[int, int], fleet: FleetView,
               rng: random.Random) -> Decision:
        workers = sorted(fleet.workers, key=lambda w: w.slot)  # registration order
        loads = [w.in_flight for w in workers]
        if (max(loads) - min(loads) > self.balance_abs_threshold
                and max(loads) > min(loads) * self.balance_rel_threshold):
            return self._least_loaded(workers, cached, "balance")
        best = max(workers, key=lambda w: cached.get(w.slot, 0))  # first of the deepest
        matched = cached.get(best.slot, 0)
        if request.prompt_tokens and matched / request.prompt_tokens > self.cache_threshold:
            return Decision(best, matched, best.backlog_s, "cache")
        return self._least_loaded(workers, cached, "load")

    @staticmethod
    def _least_loaded(workers: list[WorkerView], cached: Mapping[int, int], reason: str
                      ) -> Decision:
        chosen = min(workers, key=lambda w: w.in_flight)  # the first of the least loaded
        return Decision(chosen, cached.get(chosen.slot, 0), chosen.backlog_s, reason)
