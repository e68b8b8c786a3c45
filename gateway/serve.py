"""Run the gateway, a simulated engine, or both (``radixgate up``) under uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
from collections.abc import Iterator

import uvicorn

from gateway.app import create_app
from gateway.config import GatewayConfig


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the caller decides how to shut down."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _server(app: object, host: str, port: int) -> _Server:
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            lifespan="on", timeout_graceful_shutdown=10)
    return _Server(config)


def _on_signals(callback: object) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, callback)


async def run_gateway(config: GatewayConfig) -> None:
    server = _server(create_app(config), config.host, config.port)
    _on_signals(lambda: setattr(server, "should_exit", True))
    await server.serve()


def sim_config(args: argparse.Namespace) -> object:
    from workers.sim.model import EngineConfig
    from workers.sim.server import SimConfig

    engine = EngineConfig(args.num_blocks, args.block_size, args.max_num_seqs,
                          args.max_batched_tokens, args.profile)
    return SimConfig(args.host, args.port, args.model, args.tokenizer, args.max_model_len,
                     engine, args.speed, args.output_min, args.output_max, args.flavor,
                     args.kv_events, args.kv_events_port)


async def run_sim(config: object) -> None:
    from workers.sim.server import create_sim_app

    server = _server(create_sim_app(config), config.host, config.port)
    _on_signals(lambda: setattr(server, "should_exit", True))
    await server.serve()


def free_ports(host: str, count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def engine_and_specs(args: argparse.Namespace) -> tuple[object, list]:
    """The engine adapter and one launch spec per replica, from ``up``/``workers`` flags."""
    from workers.engines import SGLangEngine, SimEngine, VLLMEngine, gpu_groups
    from workers.engines.base import LaunchSpec

    extra = [a for a in args.extra if a != "--"]
    if args.engine == "sim":
        engine = SimEngine(args.model, args.tokenizer, args.num_blocks, args.block_size,
                           args.max_num_seqs, args.max_batched_tokens, args.max_model_len,
                           args.profile, args.speed)
        ports = free_ports(args.host, args.workers)
        return engine, [LaunchSpec(i, args.host, p, extra_args=tuple(extra))
                        for i, p in enumerate(ports)]
    if not args.engine_model:
        raise SystemExit(f"--engine {args.engine} needs --engine-model")
    served = getattr(args, "model", None) or args.engine_model
    if args.engine == "vllm":
        engine = VLLMEngine(args.engine_model, served, args.block_size, args.tp,
                            cpu=args.cpu, kv_cache_bytes=args.kv_cache_bytes,
                            python=args.engine_python, extra_args=extra)
    else:
        engine = SGLangEngine(args.engine_model, served, args.block_size, args.tp,
                              python=args.engine_python, extra_args=extra)
    gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
    groups = gpu_groups(gpus, args.tp) if gpus else [()] * getattr(args, "workers", 1)
    return engine, [LaunchSpec(i, args.host, args.base_port + i, gpus=group)
                    for i, group in enumerate(groups)]


async def run_workers(args: argparse.Namespace) -> None:
    """Engine replicas, supervised; each registers with ``--gateway`` when ready."""
    import httpx

    from workers.manager import ManagedWorker, WorkerManager

    engine, specs = engine_and_specs(args)
    headers = {"authorization": f"Bearer {args.admin_key}"} if args.admin_key else {}

    async def ready(managed: ManagedWorker) -> None:
        print(f"{managed.worker_id} ready at {managed.url}", flush=True)
        if args.gateway:
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.post(args.gateway.rstrip("/") + "/admin/workers",
                                      json={"url": managed.url, "id": managed.worker_id},
                                      headers=headers)
                if r.status_code not in (201, 409):
                    print(f"registration of {managed.worker_id} failed: {r.text}", flush=True)

    manager = WorkerManager(engine, specs, on_ready=ready, log_dir=args.log_dir)
    stop = asyncio.Event()
    _on_signals(stop.set)
    try:
        await manager.start()
        await stop.wait()
    finally:
        await manager.stop()


async def run_up(args: argparse.Namespace) -> None:
    """Workers as child processes, and the gateway in front of them."""
    from gateway.cli import gateway_config
    from workers.manager import ManagedWorker, WorkerManager

    config = gateway_config(args, [])
    config.model = args.model if args.engine == "sim" else (args.model or args.engine_model)
    config.max_model_len = args.max_model_len if args.engine == "sim" else None
    app = create_app(config)
    gateway = app.state.gateway
    router = gateway.router
    engine, specs = engine_and_specs(args)
    capacity = engine.capacity_blocks() or config.capacity_blocks

    def ready(managed: ManagedWorker) -> None:
        worker = router.fleet.get(managed.worker_id)
        if worker is None:
            router.add_worker(managed.worker_id, managed.url, capacity, args.max_num_seqs)
        else:  # a restarted engine: its cache is empty
            router.worker_restarted(worker)
            router.fleet.mark(worker, ok=True)

    def down(managed: ManagedWorker) -> None:
        worker = router.fleet.get(managed.worker_id)
        if worker is not None:
            router.fleet.mark(worker, ok=False)

    manager = WorkerManager(engine, specs, on_ready=ready, on_down=down, log_dir=args.log_dir)
    server = _server(app, args.host, args.port)
    stop = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        server.should_exit = True

    _on_signals(request_stop)
    try:
        starting = asyncio.create_task(manager.start())
        await asyncio.wait({starting, asyncio.create_task(stop.wait())},
                           return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            starting.cancel()
            return
        starting.result()
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            print(banner(args, config.model), flush=True)
        await serving
    finally:
        await manager.stop()


def banner(args: argparse.Namespace, model: str) -> str:
    base = f"http://{args.host}:{args.port}"
    return f"""
radixgate is up: {base}/v1   ({args.workers if args.engine == "sim" else "GPU"} \
{args.engine} workers, policy {args.policy}, model {model!r})

  curl {base}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello!"}}]}}'

  python -c "from openai import OpenAI; c = OpenAI(base_url='{base}/v1', api_key='none'); \
print(c.chat.completions.create(model='{model}', \
messages=[{{'role': 'user', 'content': 'Hello!'}}]).choices[0].message.content)"

  workers: {base}/admin/workers    metrics: {base}/metrics
Ctrl-C stops the gateway and every worker.
"""
