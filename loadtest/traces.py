"""Public request traces as workloads: ``mooncake:FILE`` and ``azure:FILE``.

Mooncake (JSONL: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``):
each hash id names one prefix-chained 512-token block, so each id expands to a fixed,
deterministic 512-token block (equal ids → equal tokens; the last block of a prompt is cut
to ``input_length``). The conversation trace's timestamps sit on ~3 s ticks: requests that
share a tick are spread evenly over it, or a replay would see false bursts.

Azure (CSV: ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``): arrivals and lengths
only; prompts are unique random tokens (the trace has no prefix information).
"""

from __future__ import annotations

import csv
import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from loadtest.workloads import VOCAB, WorkItem, tokens

MOONCAKE_BLOCK = 512


@lru_cache(maxsize=32768)
def mooncake_block(hash_id: int) -> np.ndarray:
    """The 512 tokens of one Mooncake hash id (deterministic, independent of position)."""
    return np.random.Generator(np.random.PCG64(hash_id)).integers(
        0, VOCAB, MOONCAKE_BLOCK, dtype=np.uint32)


def _mooncake_prompt(hash_ids: tuple[int, ...], input_length: int) -> np.ndarray:
    blocks = [mooncake_block(h) for h in hash_ids]
    ids = np.concatenate(blocks) if blocks else np.zeros(0, np.uint32)
    if len(ids) < input_length:  # a few rows claim more tokens than their ids cover
        ids = np.concatenate([ids, tokens(np.random.default_rng(input_length),
                                          input_length - len(ids))])
    return ids[:input_length]


def _spread_ticks(times: list[float]) -> list[float]:
    """Requests sharing a timestamp are spread evenly until the next distinct one."""
    out = list(times)
    i = 0
    while i < len(times):
        j = i
        while j < len(times) and times[j] == times[i]:
            j += 1
        nxt = times[j] if j < len(times) else times[i] + (times[i] - times[i - 1] if i else 1.0)
        for k in range(i, j):
            out[k] = times[i] + (k - i) * (nxt - times[i]) / (j - i)
        i = j
    return out


def read_mooncake(path: str | Path, limit: int | None = None) -> list[WorkItem]:
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if limit and len(rows) >= limit:
                    break
    rows.sort(key=lambda r: r["timestamp"])
    times = _spread_ticks([r["timestamp"] / 1000.0 for r in rows])
    items = []
    for at, row in zip(times, rows, strict=True):
        hash_ids = tuple(row["hash_ids"])
        length = int(row["input_length"])

        def build(ids: tuple[int, ...] = hash_ids, n: int = length) -> tuple:
            return (("user", _mooncake_prompt(ids, n)),)

        session = str(hash_ids[1]) if len(hash_ids) > 1 else str(hash_ids[0]) if hash_ids \
            else None
        items.append(WorkItem(at, build, max(1, int(row["output_length"])), session, length))
    return items


def read_azure(path: str | Path, limit: int | None = None) -> list[WorkItem]:
    items = []
    start = None
    with open(path) as f:
        for i, row in enumerate(csv.DictReader(f)):
            if limit and i >= limit:
                break
            stamp = datetime.fromisoformat(row["TIMESTAMP"][:26])
            start = start or stamp
            length = max(1, int(row["ContextTokens"]))

            def build(seed: int = i, n: int = length) -> tuple:
                return (("user", tokens(np.random.default_rng(seed), n)),)

            items.append(WorkItem((stamp - start).total_seconds(), build,
                                  max(1, int(row["GeneratedTokens"])), f"a{i}", length))
    return items


def read_trace(spec: str, limit: int | None = None) -> list[WorkItem]:
    """``mooncake:FILE`` or ``azure:FILE``."""
    kind, _, path = spec.partition(":")
    if kind == "mooncake":
        return read_mooncake(path, limit)
    if kind == "azure":
        return read_azure(path, limit)
    raise ValueError(f"unknown trace kind {kind!r}: use mooncake:FILE or azure:FILE")


def upper_bound_hit_rate(items: list[WorkItem], block_size: int) -> float:
    """Token hit rate of one infinite cache: every full block seen before is a hit
    (engines recompute the last prompt token, so at most ``(n − 1) // B`` blocks hit)."""
    from gateway.index.keys import block_keys, root_seed

    seen: set[bytes] = set()
    seed = root_seed("bound")
    hit = total = 0
    for item in items:
        ids = item.token_ids()
        keys = block_keys(ids.astype("<u4").tobytes(), block_size, seed)
        n = len(ids)
        cap = max(n - 1, 0) // block_size
        run = 0
        for b in range(min(cap, len(keys) // 8)):
            if keys[8 * b:8 * b + 8] in seen:
                run += 1
            else:
                break
        for b in range(len(keys) // 8):
            seen.add(keys[8 * b:8 * b + 8])
        hit += run * block_size
        total += n
    return hit / total if total else 0.0


def pooled_lru_hit_rate(items: list[WorkItem], capacity_tokens: int, block_size: int) -> float:
    """Token hit rate of ONE LRU cache as large as the whole fleet's KV together, in request
    order. Routing cannot pool separate caches into one, so for a fleet of per-worker LRU
    engines this is (about) the best any router can reach on the trace."""
    from collections import OrderedDict

    from gateway.index.keys import block_keys, root_seed

    lru: OrderedDict[bytes, None] = OrderedDict()
    capacity = capacity_tokens // block_size
    seed = root_seed("pooled")
    hit = total = 0
    for item in items:
        ids = item.token_ids()
        keys = block_keys(ids.astype("<u4").tobytes(), block_size, seed)
        blocks = [keys[i:i + 8] for i in range(0, len(keys), 8)]
        run = 0
        for key in blocks[:max(len(ids) - 1, 0) // block_size]:
            if key not in lru:
                break
            run += 1
        hit += run * block_size
        total += len(ids)
        for key in reversed(blocks):  # the head ends most recent, as engines free tail first
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
        while len(lru) > capacity:
            lru.popitem(last=False)
    return hit / total if total else 0.0
