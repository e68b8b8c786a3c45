"""Cache-oblivious baselines: round_robin and least_load.

round_robin: worker ``seq mod N`` over the healthy workers, ordered by slot.
least_load:  fewest in-flight requests; ties broken at random.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

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
