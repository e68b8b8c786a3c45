"""EngineModel: prefix cache, chunked prefill, batching, preemption, timing."""

from __future__ import annotations

import pytest

from gateway.tokenize import ids_to_bytes
from workers.sim.blocks import BlockPool
from workers.sim.model import EngineConfig, EngineModel, SimRequest
from workers.sim.profiles import get_profile


def run(model: EngineModel, requests: list[SimRequest], now: float = 0.0) -> float:
    for r in requests:
        r.arrival = now
        model.add(r)
    while model.has_work:
        result = model.step(now)
        assert result is not None
        now += result.duration
    return now


def req(name: str, tokens: list[int], out: int = 4, salt: str | None = None) -> SimRequest:
    return SimRequest(name, ids_to_bytes(tokens), out, 0.0, salt)


def test_repeat_prompt_hits_whole_blocks_but_never_the_last_token() -> None:
    model = EngineModel(EngineConfig(num_blocks=64, block_size=16))
    a, b = req("a", list(range(64))), req("b", list(range(64)))
    run(model, [a])
    run(model, [b])
    assert a.cached_tokens == 0
    assert b.cached_tokens == 48  # 64 tokens = 4 blocks; the last token is recomputed: 3
    assert b.first_token_at - b.arrival < a.first_token_at - a.arrival


def test_salt_isolates_prefixes() -> None:
    model = EngineModel(EngineConfig(num_blocks=64, block_size=16))
    run(model, [req("a", list(range(64)), salt="t1")])
    other = req("b", list(range(64)), salt="t2")
    same = req("c", list(range(64)), salt="t1")
    run(model, [other])
    run(model, [same])
    assert other.cached_tokens == 0 and same.cached_tokens == 48


def test_lru_evicts_the_least_recently_freed_prefix_first() -> None:
    model = EngineModel(EngineConfig(num_blocks=6, block_size=4))
    run(model, [req("a", [1] * 9, out=1)])  # 3 blocks (2 full + 1 partial)
    run(model, [req("b", [2] * 9, out=1)])
    run(model, [req("c", [3] * 9, out=1)])  # needs room: a's blocks go first
    a2, c2 = req("a2", [1] * 9, out=1), req("c2", [3] * 9, out=1)
    run(model, [c2])
    run(model, [a2])
    assert c2.cached_tokens == 8 and a2.cached_tokens == 0


def test_prefill_is_chunked_by_the_token_budget() -> None:
    model = EngineModel(EngineConfig(num_blocks=1024, block_size=16, max_batched_tokens=512))
    r = req("long", list(range(2000)), out=1)
    model.add(r)
    steps = 0
    while model.has_work:
        model.step(0.0)
        steps += 1
    assert steps == 4  # 512 + 512 + 512 + 464 tokens; the last step samples the token


def test_step_time_follows_the_profile() -> None:
    model = EngineModel(EngineConfig(num_blocks=1024, block_size=16, max_batched_tokens=8192))
    model.add(req("a", list(range(1000)), out=2))
    first = model.step(0.0)
    profile = get_profile("dynamo-mocker")
    expected = profile.step_seconds([(1000, 0)], 1, model.pool.usage, 1)
    assert first.duration == pytest.approx(expected)
    assert [o.index for o in first.outputs] == [0]


def test_running_requests_are_batched_and_all_finish() -> None:
    model = EngineModel(EngineConfig(num_blocks=512, block_size=16, max_num_seqs=4))
    requests = [req(f"r{i}", [i] * 100, out=5) for i in range(10)]
    run(model, requests)
    assert all(r.finished and r.generated == 5 for r in requests)
    assert model.counters.finished == 10
    assert model.pool.free_blocks == 512


def test_out_of_blocks_preempts_the_newest_and_recomputes_it() -> None:
    model = EngineModel(EngineConfig(num_blocks=12, block_size=4, max_batched_tokens=64))
    a, b = req("a", list(range(20)), out=20), req("b", list(range(100, 120)), out=20)
    run(model, [a, b])
    assert a.generated == 20 and b.generated == 20
    assert model.counters.preemptions > 0


def test_block_pool_reports_stores_and_evictions() -> None:
    events: list[tuple[str, list]] = []
    pool = BlockPool(2, 4, lambda kind, items: events.append((kind, items)))
    blocks = pool.allocate(2)
    pool.cache(blocks, [11, 12], None, [b"a", b"b"])
    pool.free(blocks)
    pool.allocate(1)  # takes the tail block first (freed tail first): 12 is evicted
    assert events == [("stored", [(11, None, b"a"), (12, 11, b"b")]), ("removed", [12])]
