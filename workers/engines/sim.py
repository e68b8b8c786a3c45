"""The simulated engine as a managed worker: ``radixgate sim`` in its own process."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from workers.engines.base import LaunchSpec


@dataclass
class SimEngine:
    model_name: str = "qwen3"
    tokenizer: str | None = None
    num_blocks: int = 16384
    block_size: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    max_model_len: int = 32768
    profile: str = "dynamo-mocker"
    speed: float = 1.0
    name: str = "sim"
    ready_path: str = "/health"
    startup_timeout_s: float = 60.0

    def command(self, spec: LaunchSpec) -> list[str]:
        argv = [sys.executable, "-m", "gateway.cli", "sim", "--host", spec.host,
                "--port", str(spec.port), "--model", self.model_name,
                "--num-blocks", str(self.num_blocks), "--block-size", str(self.block_size),
                "--max-num-seqs", str(self.max_num_seqs),
                "--max-batched-tokens", str(self.max_batched_tokens),
                "--max-model-len", str(self.max_model_len), "--profile", self.profile,
                "--speed", str(self.speed)]
        if self.tokenizer:
            argv += ["--tokenizer", self.tokenizer]
        return [*argv, *spec.extra_args]

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return {"TOKENIZERS_PARALLELISM": "false"}

    def capacity_blocks(self) -> int | None:
        return self.num_blocks
