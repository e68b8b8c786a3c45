"""``make bench``: what the gateway costs, measured against a baseline in the same run.

* **Gateway overhead**: the same chat requests sent alternately straight to a simulated
  worker and through the gateway (non-streamed, one output token, the worker sped up so
  that it answers at once). Added latency = the paired difference per request; gateway CPU
  per request from the gateway process's own CPU time.
* **Prefix index**: block keys, match and insert for a 16k-token prompt with 1M tokens
  indexed, and memory per block-worker entry (tracemalloc).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import httpx

from gateway.index.keys import block_keys, root_seed
from gateway.index.prefix import PrefixIndex
from gateway.tokenize import ChatTokenizer, ids_to_bytes
from loadtest.procs import Proc, free_port, running, start_gateway, start_sim

WORDS = (
    "time", "person", "year", "way", "day", "thing", "man", "world", "life", "hand", "part",
    "child", "eye", "woman", "place", "work", "week", "case", "point", "government", "company",
    "number", "group", "problem", "fact", "system", "program", "question", "night", "story",
    "study", "water", "money", "month", "lot", "right", "book", "job", "word", "business",
    "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour",
    "game", "line", "end", "member", "law", "car", "city", "community", "name", "president",
    "team", "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others",
    "level", "office", "door", "health", "art", "war", "history", "party", "result", "change",
    "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force",
    "education",
)


def words(n: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat(tokens: int, i: int, history_seed: int = 7) -> list[dict]:
    """A multi-turn chat of about ``tokens`` tokens: fixed system prompt and history, a new
    user turn (so every request tokenizes something new, as in real traffic)."""
    rng = random.Random(history_seed)
    messages = [{"role": "system", "content": words(800, rng)}]
    while sum(len(m["content"].split()) for m in messages) < tokens - 240:
        messages.append({"role": "user", "content": words(50, rng)})
        messages.append({"role": "assistant", "content": words(150, rng)})
    messages.append({"role": "user", "content": f"question {i}: " + words(40, random.Random(i))})
    return messages


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_overhead(tmp: Path, sizes: tuple[int, ...] = (2000, 16000), n: int = 300
                   ) -> list[dict]:
    sim, worker = start_sim(tmp, speed=100000.0, num_blocks=65536)
    gateway, gateway_url = start_gateway(tmp, [worker], "--health-interval", "30")
    port = free_port()
    floor = Proc([sys.executable, "-m", "loadtest.passthrough", str(port), worker],
                 tmp / "passthrough.log")
    floor_url = f"http://127.0.0.1:{port}"
    floor.wait_ready(floor_url + "/health")
    rows = []
    with running(gateway, floor, sim), httpx.Client(timeout=60) as client:
        for size in sizes:
            bodies = [{"model": "qwen3", "messages": chat(size, i), "max_tokens": 1}
                      for i in range(n + 20)]
            paths = {"direct": worker, "passthrough": floor_url, "gateway": gateway_url}
            for body in bodies[:20]:  # warm caches and connections on every path
                for url in paths.values():
                    client.post(url + "/v1/chat/completions", json=body)
            times: dict[str, list[float]] = {name: [] for name in paths}
            cpu0 = _cpu_seconds(gateway.pid)
            for i, body in enumerate(bodies[20:]):
                order = list(paths.items())
                for name, url in order[i % 3:] + order[:i % 3]:  # rotate who goes first
                    t0 = time.perf_counter()
                    r = client.post(url + "/v1/chat/completions", json=body)
                    times[name].append(time.perf_counter() - t0)
                    r.raise_for_status()
            cpu = (_cpu_seconds(gateway.pid) - cpu0) / n
            tokens = r.json()["usage"]["prompt_tokens"]
            added = [g - d for g, d in zip(times["gateway"], times["direct"], strict=True)]
            floor_added = [f - d for f, d in zip(times["passthrough"], times["direct"],
                                                 strict=True)]
            rows.append({
                "prompt_tokens": tokens, "requests": n,
                "direct_p50_ms": 1e3 * _quantile(times["direct"], 0.5),
                "gateway_p50_ms": 1e3 * _quantile(times["gateway"], 0.5),
                "added_p50_ms": 1e3 * _quantile(added, 0.5),
                "added_p99_ms": 1e3 * _quantile(added, 0.99),
                "passthrough_added_p50_ms": 1e3 * _quantile(floor_added, 0.5),
                "gateway_cpu_ms_per_request": 1e3 * cpu,
            })
        metrics = client.get(gateway_url + "/metrics").text
    rows.append({"gateway_internals": _internal_means(metrics)})
    return rows


def _internal_means(metrics: str) -> dict[str, float]:
    out = {}
    for name in ("radixgate_tokenize_seconds", "radixgate_route_seconds"):
        total = count = 0.0
        for line in metrics.splitlines():
            if line.startswith(name + "_sum"):
                total = float(line.split()[-1])
            elif line.startswith(name + "_count"):
                count = float(line.split()[-1])
        out[name.removeprefix("radixgate_").replace("seconds", "mean_ms")] = (
            1e3 * total / count if count else 0.0)
    return out


def bench_index(tokenizer: ChatTokenizer | None = None, indexed_tokens: int = 1_000_000,
                prompt_tokens: int = 16384, block_size: int = 16, workers: int = 8,
                trials: int = 200) -> dict:
    """Conversation-shaped prompts (shared system prompts, growing histories) fill the
    index; then 16k-token prompts that share a prefix with what is there are timed."""
    rng = random.Random(0)
    seed = root_seed("bench")
    systems = [[rng.randrange(150000) for _ in range(1024)] for _ in range(32)]
    tracemalloc.start()
    index = PrefixIndex()
    for slot in range(workers):
        index.add_worker(slot, capacity_blocks=1 << 30)
    conversations: list[list[int]] = []
    while index.stats().entries * block_size < indexed_tokens:
        if not conversations or rng.random() < 0.3:
            conversations.append(list(rng.choice(systems)))
        conv = rng.choice(conversations)
        conv.extend(rng.randrange(150000) for _ in range(rng.randint(200, 1200)))
        index.insert(rng.randrange(workers), block_keys(ids_to_bytes(conv), block_size, seed))
    # Only what the index itself allocated (nodes, key runs, dicts, heaps), not the
    # benchmark's own conversation lists.
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*gateway/index/prefix.py")])
    memory = sum(stat.size for stat in snapshot.statistics("filename"))
    tracemalloc.stop()
    stats = index.stats()
    keys_t, match_t, insert_t = [], [], []
    for _ in range(trials):
        base = rng.choice(conversations)[:prompt_tokens // 2]
        prompt = base + [rng.randrange(150000) for _ in range(prompt_tokens - len(base))]
        data = ids_to_bytes(prompt)
        t0 = time.perf_counter()
        keys = block_keys(data, block_size, seed)
        t1 = time.perf_counter()
        index.match(keys)
        t2 = time.perf_counter()
        index.insert(rng.randrange(workers), keys)
        t3 = time.perf_counter()
        keys_t.append(t1 - t0)
        match_t.append(t2 - t1)
        insert_t.append(t3 - t2)
    both = [m + i for m, i in zip(match_t, insert_t, strict=True)]
    return {
        "indexed_tokens": stats.entries * block_size, "entries": stats.entries,
        "nodes": stats.nodes, "bytes_per_entry": memory / stats.entries,
        "prompt_tokens": prompt_tokens,
        "keys_mean_ms": 1e3 * statistics.mean(keys_t),
        "match_mean_ms": 1e3 * statistics.mean(match_t),
        "insert_mean_ms": 1e3 * statistics.mean(insert_t),
        "match_insert_p50_ms": 1e3 * _quantile(both, 0.5),
        "match_insert_p99_ms": 1e3 * _quantile(both, 0.99),
    }


def format_report(overhead: list[dict], index: dict) -> str:
    lines = ["Gateway overhead (paired: each request direct, through a bare Starlette+httpx "
             "pass-through, and through radixgate)",
             f"{'prompt':>8} {'direct p50':>11} {'gw p50':>8} {'added p50':>10} "
             f"{'added p99':>10} {'bare proxy p50':>15} {'gw CPU/req':>11}"]
    for row in overhead:
        if "prompt_tokens" in row:
            lines.append(f"{row['prompt_tokens']:>8} {row['direct_p50_ms']:>9.2f}ms "
                         f"{row['gateway_p50_ms']:>6.2f}ms {row['added_p50_ms']:>8.2f}ms "
                         f"{row['added_p99_ms']:>8.2f}ms "
                         f"{row['passthrough_added_p50_ms']:>13.2f}ms "
                         f"{row['gateway_cpu_ms_per_request']:>9.2f}ms")
        else:
            lines.append("gateway internals (mean): " + ", ".join(
                f"{k} {v:.3f}" for k, v in row["gateway_internals"].items()))
    lines += ["", f"Prefix index ({index['indexed_tokens']:,} tokens indexed, "
              f"{index['entries']:,} block-worker entries, {index['nodes']:,} nodes)",
              f"  {index['prompt_tokens']}-token prompt: keys {index['keys_mean_ms']:.3f} ms, "
              f"match {index['match_mean_ms']:.3f} ms, insert {index['insert_mean_ms']:.3f} ms; "
              f"match+insert p50 {index['match_insert_p50_ms']:.3f} ms, "
              f"p99 {index['match_insert_p99_ms']:.3f} ms",
              f"  memory: {index['bytes_per_entry']:.1f} bytes per block-worker entry"]
    return "\n".join(lines)


def bench_event_ingest(blocks: int = 200_000, run: int = 16, block_size: int = 16) -> dict:
    """KV-event ingestion: msgpack decode + index updates, per block, at steady state.

    A stream shaped like vLLM's: each batch stores a run of ``run`` consecutive blocks
    (continuing an earlier prefix half the time) and evicts as many old blocks, one
    BlockRemoved per block, so the index stays at a fixed size."""
    import msgspec

    from gateway.index.events import decode_payload
    from gateway.index.ingest import EventIngest

    rng = random.Random(1)
    index = PrefixIndex(locate=True)
    index.add_worker(0, capacity_blocks=1 << 30)
    ingest = EventIngest(index, 0, block_size, lambda salt: root_seed("bench"))
    live: list[int] = []
    payloads = []
    next_hash = 1
    for _ in range(blocks // run):
        parent = rng.choice(live[-2000:]) if live and rng.random() < 0.5 else None
        hashes = list(range(next_hash, next_hash + run))
        next_hash += run
        events = [{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                   "token_ids": [rng.randrange(150000) for _ in range(run * block_size)],
                   "block_size": block_size, "lora_id": None, "medium": "GPU"}]
        live.extend(hashes)
        if len(live) > 20_000:
            for h in live[:run]:
                events.append({"type": "BlockRemoved", "block_hashes": [h], "medium": "GPU"})
            del live[:run]
        payloads.append(msgspec.msgpack.encode([time.time(), events, 0]))
    started = time.process_time()
    for payload in payloads:
        ingest.apply(decode_payload(payload))
    cpu = time.process_time() - started
    per_block = cpu / blocks
    return {"blocks": blocks, "cpu_us_per_block": 1e6 * per_block,
            "core_share_at_10k_blocks_s": per_block * 10_000,
            "orphans": ingest.stats.orphans, "removed": ingest.stats.removed}
