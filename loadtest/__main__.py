"""python -m loadtest {bench,run,simulate,peers}: measure radixgate."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def _bench(args: argparse.Namespace) -> None:
    from loadtest.bench import bench_event_ingest, bench_index, bench_overhead, format_report

    index = bench_index()
    ingest = bench_event_ingest()
    with tempfile.TemporaryDirectory() as tmp:
        overhead = bench_overhead(Path(tmp), n=args.requests)
    print(format_report(overhead, index))
    print(f"\nKV-event ingestion (msgpack decode + index): {ingest['cpu_us_per_block']:.2f} us "
          f"CPU per block: {100 * ingest['core_share_at_10k_blocks_s']:.1f}% of a core at "
          "10k blocks/s")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"overhead": overhead, "index": index,
                                               "event_ingest": ingest}, indent=2))


def _items(args: argparse.Namespace) -> list:
    from loadtest.traces import read_trace
    from loadtest.workloads import WORKLOADS

    if args.trace:
        return read_trace(args.trace, args.requests)
    return WORKLOADS[args.workload](seed=args.seed, requests=args.requests or 2000)


def _simulate(args: argparse.Namespace) -> None:
    from loadtest.report import simulation_table, write_json
    from loadtest.simulate import FleetSimulation, FleetSpec, scale_to_load
    from loadtest.traces import pooled_lru_hit_rate, upper_bound_hit_rate

    spec = FleetSpec(args.workers, args.kv_tokens, args.block_size, args.profile)
    items = _items(args)
    if args.load:
        items = scale_to_load(items, spec, args.load)
    source = args.trace or args.workload
    print(f"{source}: {len(items)} requests over {items[-1].at - items[0].at:.0f} s, "
          f"{spec.workers} workers x {spec.kv_tokens:,} KV tokens, profile {spec.profile}"
          + (f", load {args.load}" if args.load else ""), file=sys.stderr)
    bound = upper_bound_hit_rate(items, spec.block_size)
    summaries = {}
    for name in args.policy:
        result = FleetSimulation(spec, name, args.seed, index_mode=args.index_mode).run(items)
        summaries[name] = result.summary()
        predicted = result.predicted_cached_tokens
        accuracy = result.confirmed_cached_tokens / predicted if predicted else 1.0
        print(f"  {name}: hit {summaries[name]['token_hit_rate']:.3f}, TTFT mean "
              f"{summaries[name]['ttft_mean_s']:.3f} s, predicted-cached tokens confirmed "
              f"{accuracy:.3f} ({result.cpu_s:.1f} s CPU)", file=sys.stderr)
    baseline = "round_robin" if "round_robin" in summaries else None
    pooled = pooled_lru_hit_rate(items, spec.workers * spec.kv_tokens, spec.block_size)
    print(f"upper bound (one infinite cache): token hit rate {bound:.3f}; one LRU cache of "
          f"the whole fleet's {spec.workers * spec.kv_tokens:,} KV tokens: {pooled:.3f}")
    print(simulation_table(summaries, baseline))
    if args.json:
        write_json(args.json, {"trace": {"requests": len(items),
                                         "upper_bound_token_hit_rate": bound},
                               "policies": summaries})


def _shape(items: list, args: argparse.Namespace) -> list:
    """Arrival times for a live run: a target rate, or a load on a described fleet."""
    from loadtest.simulate import FleetSpec, scale_to_load

    start = items[0].at
    if args.rate:
        span = max(items[-1].at - start, 1e-9)
        factor = (len(items) / args.rate) / span
        items = [it.with_time((it.at - start) * factor) for it in items]
    elif args.load:
        spec = FleetSpec(workers=args.fleet_workers, profile=args.profile)
        items = scale_to_load(items, spec, args.load)
        items = [it.with_time((it.at - items[0].at) / args.speed) for it in items]
    else:
        items = [it.with_time(it.at - start) for it in items]
    if args.duration:
        items = [it for it in items if it.at < args.duration]
    return items


def _discover_model(target: str) -> str:
    import httpx

    response = httpx.get(target.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=10)
    return response.json()["data"][0]["id"]


def _run(args: argparse.Namespace) -> None:
    import asyncio
    import time

    from loadtest.report import plot_runs, write_csv, write_json
    from loadtest.runner import WordText, rows, run_live, summarize

    items = _shape(_items(args), args)
    model = args.model or _discover_model(args.target)
    words = WordText(args.tokenizer)
    print(f"{len(items)} requests over {items[-1].at:.0f} s against {args.target} "
          f"(model {model})", file=sys.stderr)
    started = time.perf_counter()
    records = asyncio.run(run_live(args.target, items, words, model, args.api))
    summary = summarize(records, time.perf_counter() - started)
    out = Path(args.out)
    write_json(out / "results.json", {"label": args.label, "target": args.target,
                                      "summary": summary, "requests": rows(records)})
    write_csv(out / "results.csv", rows(records))
    plots = plot_runs({args.label: rows(records)}, out)
    report = [f"# {args.label}: {args.workload or args.trace}", "",
              *(f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}"
                for k, v in summary.items()), "",
              *(f"![{p.stem}]({p.name})" for p in plots)]
    (out / "report.md").write_text("\n".join(report) + "\n")
    print("\n".join(report[2:2 + len(summary)]))


def _peers(args: argparse.Namespace) -> None:
    from loadtest.peers import compare, table

    args.fleet_workers = args.workers
    args.rate = args.duration = None
    items = _shape(_items(args), args)
    with tempfile.TemporaryDirectory() as tmp:
        summaries = compare(items, args, Path(tmp))
    print(f"{args.workload}: {len(items)} requests over {items[-1].at:.0f} s, "
          f"{args.workers} simulated workers at {args.speed}x, load {args.load}")
    print(table(summaries))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="gateway overhead and prefix-index cost")
    bench.add_argument("--requests", type=int, default=300)
    bench.add_argument("--json", default="results/bench.json")
    bench.set_defaults(func=_bench)

    from loadtest.simulate import POLICY_NAMES
    from loadtest.workloads import WORKLOADS

    sim = sub.add_parser("simulate", help="virtual-time fleet simulation of routing policies")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="mooncake:FILE or azure:FILE")
    source.add_argument("--workload", choices=sorted(WORKLOADS))
    sim.add_argument("--requests", type=int, default=None, help="use only the first N")
    sim.add_argument("--workers", type=int, default=8)
    sim.add_argument("--kv-tokens", type=int, default=1_000_000, help="KV cache per worker")
    sim.add_argument("--block-size", type=int, default=16)
    sim.add_argument("--profile", default="dynamo-mocker")
    sim.add_argument("--load", type=float, default=None,
                     help="rescale arrivals to this offered prefill load (no cache hits)")
    sim.add_argument("--policy", action="append", choices=POLICY_NAMES, required=True)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--index-mode", choices=["approximate", "precise", "hybrid"],
                     default="approximate", help="precise/hybrid: engines' KV events feed "
                     "the index")
    sim.add_argument("--json", default=None, help="write the results here")
    sim.set_defaults(func=_simulate)

    from gateway.config import default_tokenizer

    run = sub.add_parser("run", help="live open-loop load against an OpenAI endpoint")
    run.add_argument("--target", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="mooncake:FILE or azure:FILE")
    source.add_argument("--workload", choices=sorted(WORKLOADS))
    pace = run.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=float, help="mean requests per second")
    pace.add_argument("--load", type=float, help="offered prefill load on the fleet below")
    run.add_argument("--fleet-workers", type=int, default=4, help="(--load) workers behind it")
    run.add_argument("--profile", default="dynamo-mocker", help="(--load) their profile")
    run.add_argument("--speed", type=float, default=1.0, help="(--load) their --speed")
    run.add_argument("--duration", type=float, default=None, help="seconds of arrivals")
    run.add_argument("--requests", type=int, default=None)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--model", default=None, help="default: the target's first model")
    run.add_argument("--api", choices=["chat", "completions"], default="chat")
    run.add_argument("--tokenizer", default=default_tokenizer())
    run.add_argument("--label", default="run")
    run.add_argument("--out", required=True)
    run.set_defaults(func=_run)

    peers = sub.add_parser("peers", help="radixgate vs the SGLang and vLLM routers")
    peers.add_argument("--workload", choices=sorted(WORKLOADS), default="multiturn")
    peers.add_argument("--trace", default=None)
    peers.add_argument("--requests", type=int, default=300)
    peers.add_argument("--seed", type=int, default=0)
    peers.add_argument("--workers", type=int, default=2)
    peers.add_argument("--speed", type=float, default=1.0)
    peers.add_argument("--num-blocks", type=int, default=16384)
    peers.add_argument("--load", type=float, default=0.6)
    peers.add_argument("--profile", default="dynamo-mocker")
    peers.add_argument("--api", choices=["chat", "completions"], default="chat")
    peers.add_argument("--tokenizer", default=default_tokenizer())
    peers.add_argument("--peers-venv", default=".venv-peers")
    peers.add_argument("--out", default="results/peers")
    peers.set_defaults(func=_peers)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
