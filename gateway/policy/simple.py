"""Cache-oblivious baselines: round_robin, least_load and consistent_hash.

round_robin:     worker ``seq mod N`` over the healthy workers, ordered by slot.
least_load:      fewest in-flight requests; ties broken at random.
consistent_hash: the session's worker by rendezvous hashing (sticky sessions).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

import xxhash

from gateway.policy.base import Decision, FleetView, RequestView, pick_fairly


@dataclass
class RoundRobinPolicy:
    name: str = "round_robin"

    def choose(self, request: RequestView, cached: Mapping[int, int], fleet: FleetView,
               rng: random.Random) -> Decision:
        workers = sorted(fleet.workers, key=lambda w: w.slot)
        chosen = workers[request.seq % len(workers)]
        return Decision(chosen, cached.get(chosen.slot, 0), chosen.backlog_s, "rotation")


@dataclass
class LeastLoadPolicy:
    name: str = "least_load"

    def choose(self, request: RequestView, cached: Mapping[int, int], fleet: FleetView,
               rng: random.Random) -> Decision:
        fewest = min(w.in_flight for w in fleet.workers)
        chosen = pick_fairly([w for w in fleet.workers if w.in_flight == fewest], rng)
        return Decision(chosen, cached.get(chosen.slot, 0), chosen.backlog_s, "load")


@dataclass
class ConsistentHashPolicy:
    """consistent_hash: a session (``affinity_key``) always maps to the same healthy worker,
    by rendezvous hashing (highest XXH3 of key + worker id), so a worker joining or leaving
    moves only its own share of sessions. Requests without a key fall back to least_load.
    """

    name: str = "consistent_hash"

    def choose(self, request: RequestView, cached: Mapping[int, int], fleet: FleetView,
               rng: random.Random) -> Decision:
        key = request.affinity_key
        if key is None:
            return LeastLoadPolicy().choose(request, cached, fleet, rng)
        chosen = max(fleet.workers,
                     key=lambda w: xxhash.xxh3_64_intdigest(f"{key}\x00{w.worker_id}".encode()))
        return Decision(chosen, cached.get(chosen.slot, 0), chosen.backlog_s, "session")
