"""vLLM as a managed worker: one OpenAI server per GPU group, prefix caching and KV events on.

    CUDA_VISIBLE_DEVICES=<group> python -m vllm.entrypoints.openai.api_server --model M
      --host H --port P --served-model-name NAME --enable-prefix-caching --block-size B
      --prefix-caching-hash-algo sha256_cbor --enable-prompt-tokens-details
      --kv-events-config {"enable_kv_cache_events": true, "publisher": "zmq",
                          "endpoint": "tcp://*:E", "replay_endpoint": "tcp://*:E+1",
                          "topic": "kv@w<i>"}  [--tensor-parallel-size N] [extra args]

The server module is launched (not the ``vllm`` CLI) because the CLI entry point is missing
from the CPU build's distribution. On CPU: ``--enforce-eager`` (compilation costs ~50 s),
an explicit ``--kv-cache-memory-bytes``, each replica pinned to its own core with
``VLLM_CPU_OMP_THREADS_BIND`` (by default every replica binds core 0), and a block size
that is a multiple of 32 (the CPU attention backend rejects 16). SIGTERM stops the server,
which stops its engine core and workers.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from workers.engines.base import LaunchSpec


@dataclass
class VLLMEngine:
    model: str
    served_name: str | None = None
    block_size: int = 16
    tensor_parallel: int = 1
    gpu_memory_utilization: float = 0.90
    max_model_len: int | None = None
    events_port_base: int = 25700
    cpu: bool = False
    kv_cache_bytes: int | None = None
    python: str = sys.executable
    extra_args: list[str] = field(default_factory=list)
    name: str = "vllm"
    ready_path: str = "/health"
    startup_timeout_s: float = 1200.0

    def events_config(self, spec: LaunchSpec) -> dict:
        port = self.events_port_base + 2 * spec.index
        return {"enable_kv_cache_events": True, "publisher": "zmq",
                "endpoint": f"tcp://*:{port}", "replay_endpoint": f"tcp://*:{port + 1}",
                "topic": f"kv@w{spec.index}"}

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                "--host", spec.host, "--port", str(spec.port),
                "--served-model-name", self.served_name or self.model,
                "--enable-prefix-caching", "--block-size", str(self.block_size),
                "--prefix-caching-hash-algo", "sha256_cbor", "--enable-prompt-tokens-details",
                "--kv-events-config", json.dumps(self.events_config(spec))]
        if self.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(self.tensor_parallel)]
        if self.max_model_len:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.cpu:
            argv += ["--enforce-eager"]
            if self.kv_cache_bytes:
                argv += ["--kv-cache-memory-bytes", str(self.kv_cache_bytes)]
        else:
            argv += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return [*argv, *self.extra_args, *spec.extra_args]

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        if self.cpu:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(spec.index)
        elif spec.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
        return env

    def capacity_blocks(self) -> int | None:
        return None  # read from vllm:cache_config_info once the engine runs
