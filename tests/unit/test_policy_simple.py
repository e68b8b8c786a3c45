from __future__ import annotations

import random

from gateway.policy import make_policy
from gateway.policy.base import FleetView, RequestView, WorkerId, WorkerView


def workers(*in_flight: int) -> FleetView:
    return FleetView(tuple(WorkerView(i, WorkerId(f"w{i}"), n, 0, 0.0, 0, 1000, 8)
                           for i, n in enumerate(in_flight)), 0.0)


def test_round_robin_cycles_by_arrival_number() -> None:
    policy = make_policy("round_robin")
    picks = [policy.choose(RequestView(10, 1, seq=s), {}, workers(0, 0, 0), random.Random())
             .worker.slot for s in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]


def test_least_load_takes_the_fewest_in_flight_and_breaks_ties_randomly() -> None:
    policy = make_policy("least_load")
    fleet = workers(3, 1, 1, 5)
    picks = {policy.choose(RequestView(10, 1), {}, fleet, random.Random(s)).worker.slot
             for s in range(50)}
    assert picks == {1, 2}
