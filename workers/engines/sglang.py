"""SGLang as a managed worker: one server per GPU group, RadixAttention, metrics and events.

    CUDA_VISIBLE_DEVICES=<group> python -m sglang.launch_server --model-path M --host H
      --port P --served-model-name NAME --page-size B --mem-fraction-static F
      --enable-metrics --enable-cache-report
      --kv-events-config {"publisher": "zmq", "endpoint": "tcp://*:E", "topic": "kv@s<i>"}
      [--tp-size N] [extra args]

``--page-size`` is the KV block size of its events (set explicitly); ``"publisher": "zmq"``
turns events on (SGLang has no enable flag); ``--enable-cache-report`` makes it report
``cached_tokens``. SIGTERM drains in-flight requests. SGLang needs a GPU: on machines
without one it is covered by contract tests and the simulator's SGLang flavour.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from workers.engines.base import LaunchSpec


@dataclass
class SGLangEngine:
    model: str
    served_name: str | None = None
    block_size: int = 16
    tensor_parallel: int = 1
    mem_fraction_static: float = 0.85
    max_model_len: int | None = None
    events_port_base: int = 25800
    python: str = sys.executable
    extra_args: list[str] = field(default_factory=list)
    name: str = "sglang"
    ready_path: str = "/health"
    startup_timeout_s: float = 1200.0

    def events_config(self, spec: LaunchSpec) -> dict:
        return {"publisher": "zmq", "endpoint": f"tcp://*:{self.events_port_base + spec.index}",
                "topic": f"kv@s{spec.index}"}

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [self.python, "-m", "sglang.launch_server", "--model-path", self.model,
                "--host", spec.host, "--port", str(spec.port),
                "--served-model-name", self.served_name or self.model,
                "--page-size", str(self.block_size),
                "--mem-fraction-static", str(self.mem_fraction_static),
                "--enable-metrics", "--enable-cache-report",
                "--kv-events-config", json.dumps(self.events_config(spec))]
        if self.tensor_parallel > 1:
            argv += ["--tp-size", str(self.tensor_parallel)]
        if self.max_model_len:
            argv += ["--context-length", str(self.max_model_len)]
        return [*argv, *self.extra_args, *spec.extra_args]

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, spec.gpus))} if spec.gpus else {}

    def capacity_blocks(self) -> int | None:
        return None  # read from sglang:max_total_num_tokens once the engine runs
