"""Engine adapters: the exact command lines, environments and replica layout they produce."""

from __future__ import annotations

import json

import pytest

from workers.engines import SGLangEngine, SimEngine, VLLMEngine, gpu_groups
from workers.engines.base import LaunchSpec

SPEC = LaunchSpec(index=1, host="127.0.0.1", port=8101, gpus=(2, 3))


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_vllm_gpu_command_line() -> None:
    engine = VLLMEngine("Qwen/Qwen3-8B", "qwen3", block_size=16, tensor_parallel=2,
                        python="/venv/bin/python", extra_args=["--max-num-seqs", "128"])
    argv = engine.command(SPEC)
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == "Qwen/Qwen3-8B"
    assert flag(argv, "--served-model-name") == "qwen3"
    assert (flag(argv, "--host"), flag(argv, "--port")) == ("127.0.0.1", "8101")
    assert "--enable-prefix-caching" in argv and "--enable-prompt-tokens-details" in argv
    assert flag(argv, "--block-size") == "16"
    assert flag(argv, "--prefix-caching-hash-algo") == "sha256_cbor"
    assert flag(argv, "--tensor-parallel-size") == "2"
    assert flag(argv, "--gpu-memory-utilization") == "0.9"
    assert argv[-2:] == ["--max-num-seqs", "128"]
    events = json.loads(flag(argv, "--kv-events-config"))
    assert events == {"enable_kv_cache_events": True, "publisher": "zmq",
                      "endpoint": "tcp://*:25702", "replay_endpoint": "tcp://*:25703",
                      "topic": "kv@w1"}
    assert engine.environment(SPEC)["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert engine.capacity_blocks() is None  # read from the engine's metrics instead


def test_vllm_cpu_settings() -> None:
    engine = VLLMEngine("/models/tiny", block_size=32, cpu=True, kv_cache_bytes=16 << 20)
    argv = engine.command(LaunchSpec(0, "127.0.0.1", 8100))
    assert "--enforce-eager" in argv
    assert flag(argv, "--kv-cache-memory-bytes") == str(16 << 20)
    assert "--gpu-memory-utilization" not in argv
    env = engine.environment(LaunchSpec(3, "127.0.0.1", 8103))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "3" and "CUDA_VISIBLE_DEVICES" not in env


def test_sglang_command_line() -> None:
    engine = SGLangEngine("Qwen/Qwen3-8B", "qwen3", block_size=16, tensor_parallel=2,
                          python="/sg/bin/python")
    argv = engine.command(SPEC)
    assert argv[:3] == ["/sg/bin/python", "-m", "sglang.launch_server"]
    assert flag(argv, "--model-path") == "Qwen/Qwen3-8B"
    assert flag(argv, "--page-size") == "16" and flag(argv, "--tp-size") == "2"
    assert "--enable-metrics" in argv and "--enable-cache-report" in argv
    assert json.loads(flag(argv, "--kv-events-config")) == {
        "publisher": "zmq", "endpoint": "tcp://*:25801", "topic": "kv@s1"}
    assert engine.environment(SPEC) == {"CUDA_VISIBLE_DEVICES": "2,3"}


def test_sim_command_line_runs_radixgate_sim() -> None:
    argv = SimEngine(num_blocks=100, speed=5.0).command(LaunchSpec(0, "127.0.0.1", 8100))
    assert argv[1:4] == ["-m", "gateway.cli", "sim"]
    assert flag(argv, "--num-blocks") == "100" and flag(argv, "--speed") == "5.0"


@pytest.mark.parametrize(
    ("gpus", "tp", "groups"),
    [([0, 1, 2, 3], 1, [(0,), (1,), (2,), (3,)]), ([0, 1, 2, 3], 2, [(0, 1), (2, 3)]),
     ([4, 5, 6, 7, 0, 1, 2, 3], 4, [(4, 5, 6, 7), (0, 1, 2, 3)])],
)
def test_one_replica_per_gpu_group(gpus: list[int], tp: int, groups: list) -> None:
    assert gpu_groups(gpus, tp) == groups


def test_gpus_must_split_evenly() -> None:
    with pytest.raises(ValueError):
        gpu_groups([0, 1, 2], 2)
