"""The fleet simulator: conservation, the single-cache bound, load scaling, peer rule."""

from __future__ import annotations

import random

import pytest

from gateway.policy.base import FleetView, RequestView, WorkerId, WorkerView
from loadtest.peer_policies import SGLangCacheAwarePolicy
from loadtest.simulate import FleetSimulation, FleetSpec, offered_load, scale_to_load
from loadtest.traces import upper_bound_hit_rate
from loadtest.workloads import multiturn

SPEC = FleetSpec(workers=3, kv_tokens=200_000, block_size=16)


@pytest.mark.parametrize("policy", ["cache_aware", "round_robin", "least_load",
                                    "consistent_hash", "sglang_cache_aware"])
def test_every_request_completes_exactly_once(policy: str) -> None:
    items = scale_to_load(multiturn(seed=1, requests=300, system_tokens=500), SPEC, 0.9)
    result = FleetSimulation(SPEC, policy).run(items)
    assert result.requests == result.completed == len(result.ttft) == len(result.e2e) == 300
    assert result.rejected == 0
    assert result.prompt_tokens == sum(it.prompt_tokens for it in items)
    assert all(t > 0 for t in result.ttft)


def test_one_worker_with_an_infinite_cache_reaches_the_upper_bound() -> None:
    spec = FleetSpec(workers=1, kv_tokens=50_000_000, block_size=16)
    items = multiturn(seed=2, requests=150, system_tokens=800)
    sparse = [it.with_time(i * 100.0) for i, it in enumerate(items)]  # never overlapping
    result = FleetSimulation(spec, "cache_aware").run(sparse)
    hit = result.cached_tokens / result.prompt_tokens
    assert hit == pytest.approx(upper_bound_hit_rate(sparse, 16), abs=1e-12)


def test_load_scaling_hits_the_requested_offered_load() -> None:
    items = scale_to_load(multiturn(seed=3, requests=200), SPEC, 0.7)
    duration = items[-1].at - items[0].at
    assert offered_load(items, SPEC, duration) == pytest.approx(0.7)


def test_cache_aware_beats_round_robin_on_shared_prefixes() -> None:
    items = scale_to_load(multiturn(seed=4, requests=400, system_tokens=1500), SPEC, 0.8)
    hit = {p: FleetSimulation(SPEC, p).run(items).summary()["token_hit_rate"]
           for p in ("cache_aware", "round_robin")}
    assert hit["cache_aware"] > hit["round_robin"]


def _view(*loads: int) -> FleetView:
    return FleetView(tuple(WorkerView(i, WorkerId(f"w{i}"), n, 0, 0.0, 0, 1 << 20, 256)
                           for i, n in enumerate(loads)), 0.0)


@pytest.mark.parametrize(
    ("loads", "cached", "expected", "reason"),
    [
        ((0, 0, 0), {}, 0, "load"),  # no match: least loaded, ties to the first worker
        ((5, 1, 1), {}, 1, "load"),
        ((5, 1, 1), {0: 400}, 0, "cache"),  # 400/1000 > 0.3: the holder, load ignored
        ((5, 1, 1), {0: 200}, 1, "load"),  # 200/1000 ≤ 0.3: least loaded
        ((100, 1, 1), {0: 900}, 1, "balance"),  # 100 − 1 > 64 and 100 > 1.5 × 1
        ((100, 50, 40), {0: 900}, 0, "cache"),  # spread 60 ≤ 64: still the holder
    ],
)
def test_sglang_rule(loads: tuple, cached: dict, expected: int, reason: str) -> None:
    d = SGLangCacheAwarePolicy().choose(RequestView(1000, 10), cached, _view(*loads),
                                        random.Random(0))
    assert (d.worker.slot, d.reason) == (expected, reason)

