"""Fleet accounting on an injected clock."""

from __future__ import annotations

import pytest

from gateway.fleet import Fleet
from gateway.policy.timing import EngineTiming

LINEAR = EngineTiming(prefill_fixed_s=0.0, prefill_per_token_s=1e-3, prefill_per_token2_s=0.0,
                      chunk_tokens=1 << 30)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make() -> tuple[Fleet, Clock]:
    clock = Clock()
    fleet = Fleet(16, LINEAR, clock, window_s=10.0)
    fleet.add_worker("a", "http://127.0.0.1:1", 100)
    fleet.add_worker("b", "http://127.0.0.1:2", 100)
    return fleet, clock


def backlog(fleet: Fleet, worker_id: str) -> float:
    return next(w.backlog_s for w in fleet.view().workers if w.worker_id == worker_id)


def test_backlog_queues_prefills_and_drains_with_time() -> None:
    fleet, clock = make()
    a = fleet.get("a")
    fleet.admit(a, 1000, 200, 10)  # 0.8 s of prefill
    fleet.admit(a, 500, 0, 10)  # 0.5 s more, queued behind
    assert backlog(fleet, "a") == pytest.approx(1.3)
    clock.t += 1.0
    assert backlog(fleet, "a") == pytest.approx(0.3)
    clock.t += 5.0
    assert backlog(fleet, "a") == 0.0
    assert backlog(fleet, "b") == 0.0


def test_a_late_first_token_shifts_the_queue_once() -> None:
    fleet, clock = make()
    a = fleet.get("a")
    first = fleet.admit(a, 1000, 0, 10)  # predicted first token at +1.0
    second = fleet.admit(a, 1000, 0, 10)  # at +2.0
    clock.t += 1.5  # the engine is 0.5 s late
    fleet.first_token(first)
    assert backlog(fleet, "a") == pytest.approx(1.0)  # second now expected at +2.5
    clock.t += 1.0  # second arrives exactly as corrected: no further shift
    fleet.first_token(second)
    assert backlog(fleet, "a") == 0.0
    assert a.prefilling == 0


def test_release_before_prefill_returns_the_unused_work() -> None:
    fleet, clock = make()
    a = fleet.get("a")
    ticket = fleet.admit(a, 1000, 0, 10)
    clock.t += 0.25
    fleet.release(ticket, ok=False)
    assert backlog(fleet, "a") == pytest.approx(0.0)
    assert (a.in_flight, a.prefilling, a.active_tokens, a.errors_total) == (0, 0, 0, 1)


def test_unsignalled_requests_stop_prefilling_when_predicted() -> None:
    fleet, clock = make()
    a = fleet.get("a")
    fleet.admit(a, 1000, 0, 10, first_token_signal=False)
    assert fleet.view().workers[0].prefilling == 1
    clock.t += 1.01
    assert fleet.view().workers[0].prefilling == 0
    assert fleet.view().workers[0].in_flight == 1


def test_utilization_is_the_busy_fraction_of_prefill() -> None:
    fleet, clock = make()
    a = fleet.get("a")
    for _ in range(200):  # a waits for a first token 3/4 of the time, b never → ρ ≈ 3/8
        ticket = fleet.admit(a, 500, 0, 1)
        clock.t += 0.75
        fleet.first_token(ticket)
        clock.t += 0.25
        fleet.release(ticket)
    assert fleet.utilization() == pytest.approx(0.375, abs=0.03)
    clock.t += 100.0  # idle for ten windows
    assert fleet.utilization() < 0.01


def test_unhealthy_workers_leave_the_view() -> None:
    fleet, _ = make()
    assert fleet.mark(fleet.get("a"), ok=False)
    assert [w.worker_id for w in fleet.view().workers] == ["b"]
    assert fleet.mark(fleet.get("a"), ok=True)
    assert len(fleet.view().workers) == 2


def test_slots_are_reused_after_removal() -> None:
    fleet, _ = make()
    fleet.remove_worker("a")
    assert fleet.add_worker("c", "http://127.0.0.1:3", 100).slot == 0
