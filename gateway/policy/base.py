"""What a routing policy sees and returns.

A policy is a pure function of (request view, per-worker cached prefix, fleet snapshot,
random source) → decision. It does no I/O and reads no clock: everything time-dependent is
already in the snapshot. The same policy code therefore runs live in the gateway and in
virtual time in ``loadtest simulate``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NewType, Protocol

WorkerId = NewType("WorkerId", str)


@dataclass(frozen=True, slots=True)
class RequestView:
    """The routing-relevant facts of one request (never the HTTP request itself)."""

    prompt_tokens: int
    max_tokens: int
    """Expected output tokens (the request's ``max_tokens`` or the gateway's default)."""
    seq: int = 0
    """Arrival number at this gateway: lets stateless rules such as round-robin stay pure."""
    affinity_key: str | None = None
    """Session / cache key hint, when the client sent one."""
    session_slot: int | None = None
    """The worker this request's session (``affinity_key``) last went to, if healthy."""


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A healthy worker's load as the gateway accounts it, at decision time."""

    slot: int
    worker_id: WorkerId
    in_flight: int
    """Requests admitted and not yet finished."""
    prefilling: int
    """In-flight requests still waiting for their first token."""
    backlog_s: float
    """Predicted seconds until the prefills already queued on this worker are done."""
    active_tokens: int
    """KV tokens the in-flight requests occupy (prompt + expected output)."""
    capacity_tokens: int
    max_running: int
    """The engine's limit on concurrently running sequences."""


@dataclass(frozen=True, slots=True)
class FleetView:
    workers: tuple[WorkerView, ...]
    utilization: float
    """Recent prefill work offered per worker-second (0 = idle, 1 = saturated)."""


@dataclass(frozen=True, slots=True)
class Decision:
    worker: WorkerView
    cached_tokens: int
    """Prompt tokens the gateway predicts the chosen worker already holds."""
    predicted_ttft_s: float
    reason: str


class Policy(Protocol):
    """Chooses the worker for one request. ``fleet.workers`` is never empty."""

    name: str

    def choose(self, request: RequestView, cached: Mapping[int, int], fleet: FleetView,
               rng: random.Random) -> Decision:
        """``cached`` maps worker slot → predicted cached prompt tokens (absent = 0)."""
        ...


def pick_fairly(candidates: list[WorkerView], rng: random.Random) -> WorkerView:
    """Break a tie at random: never "the first worker", which piles load on one replica."""
    return candidates[0] if len(candidates) == 1 else rng.choice(candidates)
