"""Engine adapters, registered in one explicit table."""

from __future__ import annotations

from workers.engines.base import EngineAdapter, LaunchSpec
from workers.engines.sglang import SGLangEngine
from workers.engines.sim import SimEngine
from workers.engines.vllm import VLLMEngine

ENGINES: dict[str, type] = {"sim": SimEngine, "vllm": VLLMEngine, "sglang": SGLangEngine}


def gpu_groups(gpus: list[int], tensor_parallel: int) -> list[tuple[int, ...]]:
    """One replica per group of ``tensor_parallel`` GPUs, in order."""
    if tensor_parallel < 1 or len(gpus) % tensor_parallel:
        raise ValueError(f"{len(gpus)} GPUs do not split into groups of {tensor_parallel}")
    return [tuple(gpus[i:i + tensor_parallel]) for i in range(0, len(gpus), tensor_parallel)]


__all__ = ["ENGINES", "EngineAdapter", "LaunchSpec", "SGLangEngine", "SimEngine",
           "VLLMEngine", "gpu_groups"]
