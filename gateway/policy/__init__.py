"""Routing policies, registered by name in one explicit table."""

from __future__ import annotations

from collections.abc import Callable

from gateway.policy.base import Decision, FleetView, Policy, RequestView, WorkerView
from gateway.policy.cost import CacheAwarePolicy
from gateway.policy.simple import ConsistentHashPolicy, LeastLoadPolicy, RoundRobinPolicy
from gateway.policy.timing import EngineTiming

POLICIES: dict[str, Callable[[EngineTiming], Policy]] = {
    "cache_aware": lambda timing: CacheAwarePolicy(timing=timing),
    "round_robin": lambda timing: RoundRobinPolicy(),
    "least_load": lambda timing: LeastLoadPolicy(),
    "consistent_hash": lambda timing: ConsistentHashPolicy(),
}


def make_policy(name: str, timing: EngineTiming | None = None) -> Policy:
    """Build the policy registered as ``name``."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {sorted(POLICIES)}") from None
    return factory(timing or EngineTiming())


__all__ = ["POLICIES", "Decision", "FleetView", "Policy", "RequestView", "WorkerView",
           "make_policy"]
