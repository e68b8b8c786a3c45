"""``radixgate``: command line. Every flag can also be set as ``RADIXGATE_<FLAG>``.

    radixgate up       gateway + simulated workers on this machine
    radixgate gateway  the gateway in front of workers given by URL
    radixgate sim      one simulated engine (vLLM API)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from gateway.config import GatewayConfig, WorkerSpec, default_tokenizer
from gateway.policy import POLICIES


def _env_name(dest: str) -> str:
    return "RADIXGATE_" + dest.upper()


def _apply_env(parser: argparse.ArgumentParser) -> None:
    """Defaults from ``RADIXGATE_*`` variables (flags on the command line still win)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _apply_env(sub)
            continue
        value = os.environ.get(_env_name(action.dest))
        if value is None or not action.option_strings or action.dest == "help":
            continue
        if isinstance(action, argparse._StoreTrueAction):
            action.default = value.lower() in ("1", "true", "yes", "on")
        elif action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
            convert = action.type or str
            action.default = [convert(v) for v in value.replace(",", " ").split()]
        else:
            action.default = action.type(value) if action.type else value
        action.required = False


def _common(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=port, help="port to listen on")
    p.add_argument("--tokenizer", default=default_tokenizer(),
                   help="tokenizer directory (tokenizer.json + tokenizer_config.json) or hub id")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def _gateway_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default="cache_aware", choices=sorted(POLICIES),
                   help="routing policy")
    p.add_argument("--block-size", type=int, default=16, help="index block size in tokens")
    p.add_argument("--capacity-blocks", type=int, default=16384,
                   help="default per-worker KV capacity in blocks")
    p.add_argument("--max-body-bytes", type=int, default=16 << 20)
    p.add_argument("--health-interval", type=float, default=2.0, help="seconds")
    p.add_argument("--seed", type=int, default=None, help="seed for tie-breaking")
    p.add_argument("--upstream-timeout", type=float, default=600.0,
                   help="seconds to wait for a worker's next byte")
    p.add_argument("--upstream-transport", choices=["httpx", "aiohttp"], default="aiohttp",
                   help="HTTP client stack under httpx for engine calls")
    p.add_argument("--index-mode", choices=["approximate", "precise", "hybrid"],
                   default="hybrid", help="how the prefix index learns (KV events or not)")
    p.add_argument("--cache-isolation", choices=["shared", "tenant"], default="shared",
                   help="tenant: each tenant's prompts get their own cache salt")
    p.add_argument("--api-keys", default=None, metavar="FILE",
                   help="'tenant:key' lines (also RADIXGATE_API_KEYS); none: open access")
    p.add_argument("--admin-key", default=None, help="key for /admin/* endpoints")


def _sim_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen3", help="served model name")
    p.add_argument("--num-blocks", type=int, default=16384, help="KV capacity in blocks")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--profile", default="dynamo-mocker", help="timing profile")
    p.add_argument("--speed", type=float, default=1.0,
                   help="run this many times faster than the profile's real time")


def _engine_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["sim", "vllm", "sglang"], default="sim")
    p.add_argument("--engine-model", default=None, metavar="MODEL",
                   help="model path or hub id for vllm/sglang")
    p.add_argument("--gpus", default="", help="GPU ids, e.g. 0,1,2,3")
    p.add_argument("--tp", type=int, default=1, help="GPUs per replica (tensor parallel)")
    p.add_argument("--base-port", type=int, default=8100, help="first replica's port")
    p.add_argument("--engine-python", default=sys.executable,
                   help="the Python that has vllm or sglang installed")
    p.add_argument("--cpu", action="store_true", help="vLLM CPU build settings")
    p.add_argument("--kv-cache-bytes", type=int, default=None, help="(vLLM CPU) KV cache size")
    p.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after --: arguments passed to the engine as they are")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radixgate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="gateway + workers on this machine (simulated by default)")
    _common(up, 8000)
    _gateway_flags(up)
    _sim_flags(up)
    up.add_argument("--workers", type=int, default=4, help="simulated workers to start")
    up.add_argument("--log-dir", default=None, help="write each worker's log here")
    _engine_flags(up)

    workers = sub.add_parser("workers", help="engine replicas per GPU group, registered "
                             "with a gateway")
    _engine_flags(workers)
    _sim_flags(workers)
    workers.add_argument("--workers", type=int, default=1, help="(sim, or no --gpus) replicas")
    workers.add_argument("--block-size", type=int, default=16)
    workers.add_argument("--tokenizer", default=default_tokenizer())
    workers.add_argument("--host", default="127.0.0.1")
    workers.add_argument("--gateway", default=None, help="register with this gateway URL")
    workers.add_argument("--admin-key", default=None, help="the gateway's admin key")
    workers.add_argument("--log-dir", default=None)
    workers.add_argument("--log-level", default="info",
                         choices=["debug", "info", "warning", "error"])

    gw = sub.add_parser("gateway", help="the gateway in front of running workers")
    _common(gw, 8000)
    _gateway_flags(gw)
    gw.add_argument("--worker", action="append", default=[], metavar="URL",
                    help="worker base URL (repeat for each worker)")
    gw.add_argument("--model", default=None,
                    help="served model name (default: learned from the workers)")
    gw.add_argument("--max-model-len", type=int, default=None,
                    help="context length (default: learned from the workers)")

    sim = sub.add_parser("sim", help="one simulated engine speaking vLLM's API")
    _common(sim, 8100)
    _sim_flags(sim)
    sim.add_argument("--block-size", type=int, default=16)
    sim.add_argument("--output-min", type=int, default=16)
    sim.add_argument("--output-max", type=int, default=256)
    sim.add_argument("--flavor", choices=["vllm", "sglang"], default="vllm",
                     help="which engine's KV events and extra endpoints to imitate")
    sim.add_argument("--no-kv-events", dest="kv_events", action="store_false",
                     help="publish no KV-cache events")
    sim.add_argument("--kv-events-port", type=int, default=0,
                     help="PUB port (replay: the next one); 0: any free port")
    _apply_env(parser)
    return parser


def gateway_config(args: argparse.Namespace, workers: list[str]) -> GatewayConfig:
    return GatewayConfig(
        host=args.host, port=args.port, workers=[WorkerSpec(url) for url in workers],
        policy=args.policy, tokenizer=args.tokenizer, model=getattr(args, "model", None),
        max_model_len=getattr(args, "max_model_len", None), block_size=args.block_size,
        capacity_blocks=args.capacity_blocks, max_body_bytes=args.max_body_bytes,
        health_interval_s=args.health_interval, seed=args.seed,
        upstream_timeout_s=args.upstream_timeout, cache_isolation=args.cache_isolation,
        index_mode=args.index_mode, upstream_transport=args.upstream_transport,
        api_keys_file=args.api_keys, admin_key=args.admin_key,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per upstream call
    from gateway import serve  # imported late: `--help` stays instant

    if args.command == "gateway":
        if not args.worker:
            sys.exit("radixgate gateway: give at least one --worker URL")
        _run(serve.run_gateway(gateway_config(args, args.worker)))
    elif args.command == "sim":
        _run(serve.run_sim(serve.sim_config(args)))
    elif args.command == "up":
        _run(serve.run_up(args))
    elif args.command == "workers":
        _run(serve.run_workers(args))


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (it is with uvicorn[standard]): a faster loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


if __name__ == "__main__":
    main()
