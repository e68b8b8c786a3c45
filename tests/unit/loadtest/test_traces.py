"""Trace readers: hash ids become token blocks that keep the trace's prefix structure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from loadtest.traces import (
    pooled_lru_hit_rate,
    read_azure,
    read_mooncake,
    upper_bound_hit_rate,
)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_equal_hash_ids_give_equal_tokens_and_lengths_are_kept(tmp_path: Path) -> None:
    trace = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 3000, "input_length": 1300, "output_length": 7, "hash_ids": [1, 2, 4]},
        {"timestamp": 6000, "input_length": 600, "output_length": 1, "hash_ids": [9, 2]},
    ])
    a, b, c = (it.token_ids() for it in read_mooncake(trace))
    assert (len(a), len(b), len(c)) == (1100, 1300, 600)
    assert np.array_equal(a[:1024], b[:1024])  # ids 1, 2 shared: 2 × 512 tokens
    assert not np.array_equal(a[1024:1100], b[1024:1100])  # id 3 vs id 4
    assert not np.array_equal(a[:512], c[:512])


def test_requests_sharing_a_tick_are_spread_over_it(tmp_path: Path) -> None:
    rows = [{"timestamp": t, "input_length": 10, "output_length": 1, "hash_ids": [i]}
            for i, t in enumerate([0, 0, 0, 0, 3000, 6000])]
    items = read_mooncake(write_jsonl(tmp_path / "t.jsonl", rows))
    assert [it.at for it in items[:5]] == [0.0, 0.75, 1.5, 2.25, 3.0]


def test_upper_bound_counts_blocks_seen_before(tmp_path: Path) -> None:
    trace = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
    ])
    # Second request: all but its last block of 16 hit (the engine recomputes the last
    # token): 1008 of 2048 prompt tokens.
    assert upper_bound_hit_rate(read_mooncake(trace), 16) == 1008 / 2048


def test_azure_rows_become_timed_unique_prompts(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n"
                    "2023-11-16 18:15:50.9951690,396,109\n")
    items = read_azure(path)
    assert [round(it.at, 3) for it in items] == [0.0, 4.315]
    assert [len(it.token_ids()) for it in items] == [374, 396]
    assert [it.output_tokens for it in items] == [44, 109]


def test_pooled_lru_bound_between_nothing_and_the_infinite_cache(tmp_path: Path) -> None:
    rows = [{"timestamp": i, "input_length": 1024, "output_length": 1, "hash_ids": [i % 3, 9]}
            for i in range(6)]
    items = read_mooncake(write_jsonl(tmp_path / "t.jsonl", rows))
    infinite = upper_bound_hit_rate(items, 16)
    assert pooled_lru_hit_rate(items, 10_000_000, 16) == infinite > 0
    assert pooled_lru_hit_rate(items, 1024, 16) < infinite  # room for one prompt only
