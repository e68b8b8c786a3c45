"""Virtual-time simulation of a whole fleet: the real router, the real engine model.

Each policy gets a fresh fleet: the gateway's :class:`~gateway.router.Router` (prefix
index, policy, fleet accounting) on a virtual clock, in front of N
:class:`~workers.sim.model.EngineModel` replicas, the same cache-and-timing model
``radixgate sim`` serves over HTTP. Events: request arrivals, and engine steps ending.
Streaming semantics: the router hears of every first token and completion, as the live
gateway does for streamed requests.

``--load L`` rescales arrival times so that the prefill work the trace offers with no cache
hits is ``L`` times the fleet's prefill capacity under the profile: Σ prefill(prompt) /
(workers × duration) = L, each prompt prefilled alone in chunks of ``max_batched_tokens``.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gateway.fleet import Fleet
from gateway.index.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineHash,
    EventBatch,
)
from gateway.index.ingest import EventIngest
from gateway.index.prefix import PrefixIndex
from gateway.policy import POLICIES, make_policy
from gateway.policy.base import Policy
from gateway.policy.cost import CacheAwarePolicy
from gateway.policy.timing import EngineTiming
from gateway.router import Route, Router
from loadtest.peer_policies import SGLANG_TREE_TOKENS, SGLangCacheAwarePolicy
from loadtest.workloads import WorkItem
from workers.sim.model import EngineConfig, EngineModel, SimRequest, TokenOut
from workers.sim.profiles import get_profile

POLICY_NAMES = [*POLICIES, "cache_aware+hints", "sglang_cache_aware"]
HINTED = {"consistent_hash", "cache_aware+hints"}
NAMESPACE = "\x00"
"""Block-key namespace of the simulated fleet: one unnamed model, no salt (as the gateway
builds it: model + NUL + salt)."""
"""Policies that see each request's session key (as a client's ``prompt_cache_key``)."""


@dataclass(frozen=True)
class FleetSpec:
    workers: int = 8
    kv_tokens: int = 1_000_000
    block_size: int = 16
    profile: str = "dynamo-mocker"
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    def engine_config(self) -> EngineConfig:
        return EngineConfig(self.kv_blocks, self.block_size, self.max_num_seqs,
                            self.max_batched_tokens, self.profile)


@dataclass
class PolicyResult:
    name: str
    requests: int = 0
    completed: int = 0
    rejected: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    first_arrival: float = 0.0
    last_finish: float = 0.0
    prefill_tokens_by_worker: list[int] = field(default_factory=list)
    predicted_cached_tokens: int = 0
    confirmed_cached_tokens: int = 0
    """Of the predicted cached tokens, those the engine actually served from cache."""
    reasons: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0

    def summary(self) -> dict[str, float | int]:
        ttft = np.array(self.ttft) if self.ttft else np.zeros(1)
        loads = np.array(self.prefill_tokens_by_worker, dtype=float)
        span = max(self.last_finish - self.first_arrival, 1e-9)
        return {
            "token_hit_rate": self.cached_tokens / self.prompt_tokens if self.prompt_tokens
            else 0.0,
            "ttft_mean_s": float(ttft.mean()),
            "ttft_p50_s": float(np.percentile(ttft, 50)),
            "ttft_p99_s": float(np.percentile(ttft, 99)),
            "e2e_mean_s": float(np.mean(self.e2e)) if self.e2e else 0.0,
            "goodput_rps": self.completed / span,
            "rejected": self.rejected,
            "load_max_over_mean": float(loads.max() / loads.mean()) if loads.mean() else 1.0,
        }


class _EngineEvents:
    """A simulated engine's KV events, straight from its block pool into the index (the
    wire format is tested elsewhere; here only the information matters)."""

    live = True

    def __init__(self, ingest: EventIngest, block_size: int) -> None:
        self.ingest = ingest
        self.block_size = block_size

    def __call__(self, kind: str, items: list) -> None:
        if kind == "stored":  # consecutive blocks in one event, as vLLM batches them
            events, run = [], []
            for h, parent, tokens in items:
                if run and parent != run[-1][0]:
                    events.append(self._stored(run))
                    run = []
                run.append((h, parent, tokens))
            if run:
                events.append(self._stored(run))
        elif kind == "removed":
            events = [BlockRemoved(tuple(EngineHash(h) for h in items))]
        else:
            events = [AllBlocksCleared()]
        self.ingest.apply(EventBatch(0.0, tuple(events), 0))

    def _stored(self, run: list) -> BlockStored:
        parent = run[0][1]
        return BlockStored(tuple(EngineHash(h) for h, _, _ in run),
                           EngineHash(parent) if parent is not None else None,
                           tuple(array("I", b"".join(t for _, _, t in run))), self.block_size)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def build_policy(name: str, timing: EngineTiming) -> Policy:
    if name == "sglang_cache_aware":
        return SGLangCacheAwarePolicy()
    if name == "cache_aware+hints":
        return CacheAwarePolicy(timing=timing, name=name)
    return make_policy(name, timing)


def offered_load(items: list[WorkItem], spec: FleetSpec, duration: float) -> float:
    """Prefill work with no cache hits, per worker-second of the trace."""
    profile = get_profile(spec.profile)
    chunk = spec.max_batched_tokens
    work = 0.0
    for item in items:
        n = item.prompt_tokens
        steps = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
        work += sum(profile.prefill_ms([(c, 0)], 1) for c in steps) / 1000.0
    return work / (spec.workers * duration)


def scale_to_load(items: list[WorkItem], spec: FleetSpec, load: float) -> list[WorkItem]:
    start, end = items[0].at, items[-1].at
    duration = max(end - start, 1e-9)
    factor = offered_load(items, spec, duration) / load
    return [it.with_time(start + (it.at - start) * factor) for it in items]


class FleetSimulation:
    """One policy, one fleet, one pass over the workload."""

    def __init__(self, spec: FleetSpec, policy: str, seed: int = 0,
                 timing: EngineTiming | None = None, index_mode: str = "approximate") -> None:
        self.spec = spec
        self.hints = policy in HINTED
        self.clock = VirtualClock()
        timing = timing or EngineTiming(chunk_tokens=spec.max_batched_tokens)
        fleet = Fleet(spec.block_size, timing, self.clock)
        events = index_mode != "approximate" and policy != "sglang_cache_aware"
        self.router = Router(fleet, PrefixIndex(locate=events), build_policy(policy, timing),
                             random.Random(seed), mode=index_mode if events else "approximate")
        capacity = spec.kv_blocks
        if policy == "sglang_cache_aware":  # the peer keeps its own (much larger) tree budget
            capacity = SGLANG_TREE_TOKENS // spec.block_size
        self.workers = [self.router.add_worker(f"w{i}", f"sim://w{i}", capacity,
                                               spec.max_num_seqs)
                        for i in range(spec.workers)]
        self.engines = []
        for worker in self.workers:
            listener = None
            if events:
                ingest = EventIngest(self.router.index, worker.slot, spec.block_size,
                                     lambda salt: self.router.seed(NAMESPACE + (salt or "")))
                worker.events = listener = _EngineEvents(ingest, spec.block_size)
            self.engines.append(EngineModel(spec.engine_config(), listener=listener))
        self.busy = [False] * spec.workers
        self.routes: dict[int, Route] = {}
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = itertools.count()
        self.result = PolicyResult(policy, prefill_tokens_by_worker=[0] * spec.workers)

    def run(self, items: list[WorkItem], progress: Callable[[int], None] | None = None
            ) -> PolicyResult:
        started = time.process_time()
        result = self.result
        result.first_arrival = items[0].at if items else 0.0
        pending = iter(items)
        nxt = next(pending, None)
        done = 0
        while nxt is not None or self.events:
            if nxt is not None and (not self.events or nxt.at <= self.events[0][0]):
                self.clock.now = nxt.at
                self._arrive(nxt)
                nxt = next(pending, None)
                done += 1
                if progress and done % 500 == 0:
                    progress(done)
                continue
            at, _, worker, outputs = heapq.heappop(self.events)
            self.clock.now = at
            self._deliver(worker, outputs)
            self._step(worker)
        result.cpu_s = time.process_time() - started
        return result

    def _arrive(self, item: WorkItem) -> None:
        result, spec = self.result, self.spec
        result.requests += 1
        ids = item.token_ids()
        n = len(ids)
        if -(-n // spec.block_size) > spec.kv_blocks:
            result.rejected += 1  # no replica could ever hold this prompt
            return
        data = ids.astype("<u4").tobytes()
        keys = self.router.keys(data, namespace=NAMESPACE)
        route = self.router.route(keys, n, item.output_tokens,
                                  affinity_key=item.session if self.hints else None)
        assert route is not None
        slot = route.worker.slot
        result.predicted_cached_tokens += route.decision.cached_tokens
        result.reasons[route.decision.reason] = result.reasons.get(route.decision.reason, 0) + 1
        request = SimRequest(str(result.requests), data, item.output_tokens, self.clock.now)
        self.routes[id(request)] = route
        self.engines[slot].add(request)
        if not self.busy[slot]:
            self._step(slot)

    def _step(self, slot: int) -> None:
        engine = self.engines[slot]
        step = engine.step(self.clock.now) if engine.has_work else None
        self.busy[slot] = step is not None
        if step is not None:
            heapq.heappush(self.events, (self.clock.now + step.duration, next(self.seq), slot,
                                         step.outputs))

    def _deliver(self, slot: int, outputs: list[TokenOut]) -> None:
        router, result = self.router, self.result
        for out in outputs:
            route = self.routes[id(out.request)]
            request = out.request
            if out.index == 0:
                router.first_token(route)
                result.ttft.append(self.clock.now - request.arrival)
                cached = request.cached_tokens or 0
                result.prompt_tokens += request.prompt_tokens
                result.cached_tokens += cached
                result.prefill_tokens_by_worker[slot] += request.prompt_tokens - cached
                result.confirmed_cached_tokens += min(cached, route.decision.cached_tokens)
            if out.finished:
                router.finish(route)
                del self.routes[id(request)]
                result.completed += 1
                result.e2e.append(self.clock.now - request.arrival)
                result.last_finish = self.clock.now


def simulate(items: list[WorkItem], spec: FleetSpec, policies: list[str], seed: int = 0,
             progress: Callable[[str, int], None] | None = None,
             index_mode: str = "approximate") -> dict[str, PolicyResult]:
    results = {}
    for name in policies:
        sim = FleetSimulation(spec, name, seed, index_mode=index_mode)
        results[name] = sim.run(items, (lambda n, p=name: progress(p, n)) if progress else None)
    return results
