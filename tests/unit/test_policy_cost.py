"""cache_aware: the cost model's arithmetic and its behaviour across loads."""

from __future__ import annotations

import random

import pytest

from gateway.policy.base import FleetView, RequestView, WorkerId, WorkerView
from gateway.policy.cost import CacheAwarePolicy
from gateway.policy.timing import EngineTiming

# A linear timing model makes the arithmetic readable: 1 ms per uncached token.
LINEAR = EngineTiming(prefill_fixed_s=0.0, prefill_per_token_s=1e-3, prefill_per_token2_s=0.0,
                      chunk_tokens=1 << 30, decode_c0_s=0.0, decode_c1_s=0.0, decode_c2_s=0.0,
                      decode_min_s=0.0)


def worker(slot: int, backlog: float = 0.0, in_flight: int = 0, prefilling: int = 0
           ) -> WorkerView:
    return WorkerView(slot, WorkerId(f"w{slot}"), in_flight, prefilling, backlog, 0, 1 << 20,
                      256)


def choose(cached: dict[int, int], workers: list[WorkerView], utilization: float,
           prompt: int = 1000, seed: int = 0) -> tuple[int, str]:
    policy = CacheAwarePolicy(timing=LINEAR)
    d = policy.choose(RequestView(prompt, 100), cached, FleetView(tuple(workers), utilization),
                      random.Random(seed))
    return d.worker.slot, d.reason


@pytest.mark.parametrize(
    ("utilization", "expected_lambda"),
    [(0.0, 0.0), (0.5, 1.0), (0.8, 4.0), (0.9, 9.0), (1.0, 49.0)],  # ρ/(1−ρ), ρ ≤ 0.98
)
def test_externality_price(utilization: float, expected_lambda: float) -> None:
    assert CacheAwarePolicy().externality(utilization) == pytest.approx(expected_lambda)


@pytest.mark.parametrize(
    ("utilization", "holder_backlog", "expected", "reason"),
    [
        # Holder has 800 of 1000 tokens: own = 0.2 s there, 1.0 s elsewhere.
        # Idle fleet (λ=0): holder costs 0.5 + 0.2 = 0.7 > 0 + 1.0? no: 0.7 < 1.0 → holder.
        (0.0, 0.5, 0, "cache"),
        # Idle fleet, holder 0.9 s behind: 1.1 > 1.0 → spill to the idle worker.
        (0.0, 0.9, 1, "spill"),
        # Busy fleet (ρ=0.8, λ=4): holder 0.9 + 0.2·5 = 1.9 < 0 + 1.0·5 = 5.0 → keep affinity.
        (0.8, 0.9, 0, "cache"),
        # Busy fleet, holder 4.5 s behind: 4.5 + 1.0 = 5.5 > 5.0 → the prefix replicates.
        (0.8, 4.5, 1, "spill"),
    ],
)
def test_affinity_weighed_against_load(utilization: float, holder_backlog: float,
                                       expected: int, reason: str) -> None:
    workers = [worker(0, backlog=holder_backlog), worker(1)]
    assert choose({0: 800}, workers, utilization) == (expected, reason)


def test_no_cache_anywhere_goes_to_least_backlog() -> None:
    workers = [worker(0, backlog=0.3), worker(1, backlog=0.1), worker(2, backlog=0.2)]
    assert choose({}, workers, 0.5) == (1, "load")


def test_ties_are_broken_at_random_not_by_worker_order() -> None:
    workers = [worker(i) for i in range(4)]
    picks = {choose({}, workers, 0.0, seed=s)[0] for s in range(200)}
    assert picks == {0, 1, 2, 3}


def test_full_worker_waits_for_a_running_slot() -> None:
    policy = CacheAwarePolicy(timing=EngineTiming())
    full = WorkerView(0, WorkerId("w0"), 256, 0, 0.0, 0, 1 << 20, 256)
    free = WorkerView(1, WorkerId("w1"), 10, 0, 0.0, 0, 1 << 20, 256)
    request = RequestView(1000, 500)
    assert policy.cost(request, full, 0, 0.0).wait_s > policy.cost(request, free, 0, 0.0).wait_s


def test_hot_prefix_spreads_once_its_holder_saturates() -> None:
    """Requests sharing one prefix, no completions: the holder's backlog grows with every
    request routed to it, so the prefix is replicated instead of piling on one worker."""
    policy = CacheAwarePolicy(timing=LINEAR)
    backlog = [0.0] * 4
    holders = {0}
    rng = random.Random(1)
    for _ in range(40):
        workers = tuple(worker(i, backlog=backlog[i]) for i in range(4))
        cached = {slot: 900 for slot in holders}
        d = policy.choose(RequestView(1000, 10), cached, FleetView(workers, 0.5), rng)
        backlog[d.worker.slot] += (1000 - d.cached_tokens) * 1e-3
        holders.add(d.worker.slot)
    assert len(holders) == 4
    assert max(backlog) < 2 * min(backlog) + 1.0


@pytest.mark.parametrize(
    ("session_backlog", "expected", "reason"),
    [
        # Both hold 900 of 1000 tokens; s also holds the session's last turn (950).
        # Leaving s costs (1+λ)·prefill(950) = 0.95 s at λ=0.
        (0.5, 0, "session"),  # s: 0.5 + 0.05 = 0.55 < w: 0.1 + 0.95 = 1.05
        (1.2, 1, "spill"),  # s: 1.2 + 0.05 = 1.25 > 1.05: a saturated s is left
    ],
)
def test_session_hint_is_sticky_until_its_worker_saturates(session_backlog: float,
                                                           expected: int, reason: str) -> None:
    policy = CacheAwarePolicy(timing=LINEAR)
    workers = (worker(0, backlog=session_backlog), worker(1))
    request = RequestView(1000, 10, affinity_key="k", session_slot=0)
    d = policy.choose(request, {0: 950, 1: 900}, FleetView(workers, 0.0), random.Random(0))
    assert (d.worker.slot, d.reason) == (expected, reason)
