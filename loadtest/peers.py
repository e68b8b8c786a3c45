"""``make bench-peers``: radixgate and the peer routers side by side, on one simulated fleet.

One fleet of simulated engines (real processes, sped up) serves every run, one after
another, with its prefix caches reset between runs: radixgate (cache_aware), the SGLang
router and the vLLM router (each cache_aware and round_robin), and radixgate's
round_robin as the cache-oblivious baseline. The same workload goes through each; results
are printed with ratios to radixgate. Everything binds to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtest.procs import HOST, Proc, free_port, radixgate, running, start_sim
from loadtest.report import plot_runs, write_json
from loadtest.runner import WordText, rows, run_live, summarize
from loadtest.workloads import WorkItem


@dataclass(frozen=True)
class Router:
    label: str
    argv: list[str]
    ready_path: str


def routers(peers_bin: Path, workers: list[str], port: int) -> list[Router]:
    ours = radixgate("gateway", "--port", str(port), "--log-level", "warning",
                     *(a for w in workers for a in ("--worker", w)))
    sglang = [str(peers_bin / "python"), "-m", "sglang_router.launch_router", "--host", HOST,
              "--port", str(port), "--prometheus-host", HOST, "--prometheus-port",
              str(free_port()), "--worker-urls", *workers]
    vllm = [str(peers_bin / "vllm-router"), "--host", HOST, "--port", str(port),
            "--prometheus-host", HOST, "--prometheus-port", str(free_port()),
            "--worker-urls", *workers]
    return [
        Router("radixgate", [*ours, "--policy", "cache_aware"], "/ready"),
        Router("sglang cache_aware", [*sglang, "--policy", "cache_aware"], "/health"),
        Router("sglang round_robin", [*sglang, "--policy", "round_robin"], "/health"),
        Router("vllm-router cache_aware", [*vllm, "--policy", "cache_aware"], "/health"),
        Router("vllm-router round_robin", [*vllm, "--policy", "round_robin"], "/health"),
        Router("round_robin", [*ours, "--policy", "round_robin"], "/ready"),
    ]


def reset_caches(workers: list[str]) -> None:
    for url in workers:
        deadline = time.monotonic() + 30
        while httpx.post(url + "/reset_prefix_cache", timeout=10).status_code != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} never went idle")
            time.sleep(0.2)


def compare(items: list[WorkItem], args: argparse.Namespace, tmp: Path) -> dict[str, dict]:
    sims = [start_sim(tmp, speed=args.speed, num_blocks=args.num_blocks)
            for _ in range(args.workers)]
    workers = [url for _, url in sims]
    words = WordText(args.tokenizer)
    summaries, records = {}, {}
    with running(*(p for p, _ in sims)):
        for router in routers(Path(args.peers_venv) / "bin", workers, free_port()):
            port = router.argv[router.argv.index("--port") + 1]
            url = f"http://{HOST}:{port}"
            proc = Proc(router.argv, tmp / f"{router.label.replace(' ', '_')}.log")
            with running(proc):
                proc.wait_ready(url + router.ready_path, timeout=60)
                time.sleep(1.0)  # let the router see every worker healthy
                print(f"--- {router.label}", file=sys.stderr)
                started = time.perf_counter()
                result = asyncio.run(run_live(url, items, words, "qwen3", args.api))
                summaries[router.label] = summarize(result, time.perf_counter() - started)
                records[router.label] = rows(result)
            reset_caches(workers)
    out = Path(args.out)
    write_json(out / "peers.json", {"summaries": summaries})
    plot_runs(records, out)
    return summaries


def table(summaries: dict[str, dict], base: str = "radixgate") -> str:
    ref = summaries[base]
    lines = [f"{'router':<26} {'TTFT mean':>10} {'TTFT p99':>9} {'hit':>6} {'tok/s':>8} "
             f"{'errors':>6} {'mean ×ours':>10} {'p99 ×ours':>9}"]
    for name, s in summaries.items():
        lines.append(f"{name:<26} {s['ttft_mean_s']:>9.3f}s {s['ttft_p99_s']:>8.3f}s "
                     f"{s['token_hit_rate']:>6.3f} {s['throughput_tok_s']:>8.0f} "
                     f"{s['errors'] + s['rejected']:>6} "
                     f"{s['ttft_mean_s'] / ref['ttft_mean_s']:>10.2f} "
                     f"{s['ttft_p99_s'] / ref['ttft_p99_s']:>9.2f}")
    return "\n".join(lines)
