"""cache_aware: route to the worker with the lowest predicted time to first token, with the
request's extra prefill priced by how busy the fleet is.

For a prompt of n tokens and each healthy worker w:

    hit_w  = prompt tokens w is predicted to hold (prefix index)
    own_w  = prefill(n − hit_w) + steps(n − hit_w) · decode_step(kv_w)   [if w is decoding]
    wait_w = backlog_w                                  queued prefill work ahead, seconds
           + seat_w                                     waiting for a running slot, if full
    cost_w = wait_w + own_w + λ · own_w,                λ = ρ / (1 − ρ),  ρ = min(util, ρ_max)

``wait_w + own_w`` is the request's own predicted TTFT on w. The last term is the
externality: the prefill this request adds to w also delays every request queued behind
it, and in a queue at utilisation ρ each second of added work costs the others about
ρ/(1−ρ) seconds of waiting. An idle fleet (ρ≈0) therefore spreads freely on load, while
a busy one keeps cache affinity, the regime where greedy own-TTFT routing gives it up.
Affinity is never absolute: a hot prefix's holder accumulates ``wait`` until prefilling the
prefix elsewhere is cheaper, and the prefix is replicated. ρ is capped (ρ_max = 0.98, so
λ ≤ 49) so that even a saturated fleet still spills from a hot worker; below saturation
the cap does not bind. ρ is measured by the fleet (the busy fraction of prefill).

A session hint (``prompt_cache_key``, ``user``, ``x-session-id``) names the worker s the
session last used. The client promises more of the session, and what s holds for it is
the session's working set; a request leaves s only when waiting there costs more than
rebuilding that set elsewhere, priced like any prefill:

    cost_w += (1 + λ) · prefill(hit_s)      for every w ≠ s

so sessions stay put while s is not saturated, and overflow when it is.

Ties (equal cost to 1e-9 relative, e.g. several idle workers) go to the worker with the
fewest requests in hand (the prediction cannot see everything an engine is doing), and
then at random.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.policy.base import Decision, FleetView, RequestView, WorkerView, pick_fairly
from gateway.policy.timing import EngineTiming


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    hit: int
    own_s: float
    wait_s: float
    cost: float

    @property
    def ttft_s(self) -> float:
        return self.wait_s + self.own_s


@dataclass
class CacheAwarePolicy:
    timing: EngineTiming = field(default_factory=EngineTiming)
    max_utilization: float = 0.98
    name: str = "cache_aware"

    def externality(self, utilization: float) -> float:
        rho = min(max(utilization, 0.0), self.max_utilization)
        return rho / (1.0 - rho)

    def cost(self, request: RequestView, worker: WorkerView, hit: int, lam: float
             ) -> CostBreakdown:
        timing = self.timing
        new = max(request.prompt_tokens - hit, 0)
        kv = worker.active_tokens / worker.capacity_tokens if worker.capacity_tokens else 0.0
        own = timing.queued_prefill_s(new, queue_empty=worker.backlog_s <= 0.0)
        if worker.in_flight > worker.prefilling:  # running decodes ride along every step
            own += timing.prefill_steps(new) * timing.decode_step_s(kv)
        wait = worker.backlog_s
        over = worker.in_flight - worker.max_running
        if over >= 0:  # no free running slot: wait for (over+1) of max_running to finish
            wait += (over + 1) / worker.max_running * request.max_tokens * timing.decode_step_s(kv)
        return CostBreakdown(hit, own, wait, wait + own + lam * own)

    def choose(self, request: RequestView, cached: Mapping[int, int], fleet: FleetView,
               rng: random.Random) -> Decision:
        lam = self.externality(fleet.utilization)
        costs = [(w, self.cost(request, w, cached.get(w.slot, 0), lam)) for w in fleet.workers]
        costs = self._session_affinity(request, costs, lam)
        best = min(c.cost for _, c in costs)
        tied = [w for w, c in costs if c.cost <= best * (1 + 1e-9) + 1e-12]
        if len(tied) > 1:  # equal predictions: the one with the least work in hand
            least = min((w.prefilling, w.in_flight) for w in tied)
            tied = [w for w in tied if (w.prefilling, w.in_flight) == least]
        chosen = pick_fairly(tied, rng)
        breakdown = next(c for w, c in costs if w is chosen)
        top_hit = max(c.hit for _, c in costs)
        if chosen.slot == request.session_slot:
            reason = "session"
        elif top_hit == 0:
            reason = "load"
        elif breakdown.hit == top_hit:
            reason = "cache"
        else:
            reason = "spill"  # a better-cached worker was too busy: the prefix replicates
        return Decision(chosen, breakdown.hit, breakdown.ttft_s, reason)

    def _session_affinity(self, request: RequestView,
                          costs: list[tuple[WorkerView, CostBreakdown]], lam: float,
                          ) -> list[tuple[WorkerView, CostBreakdown]]:
        home = next((c for w, c in costs if w.slot == request.session_slot), None)
        if home is None or home.hit == 0:
            return costs
        leave = (1.0 + lam) * self.timing.prefill_s(home.hit)
        return [(w, c if w.slot == request.session_slot else CostBreakdown(
            c.hit, c.own_s, c.wait_s, c.cost + leave)) for w, c in costs]
