"""An engine's own view of its load and cache, from its Prometheus ``/metrics``.

vLLM: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
``vllm:kv_cache_usage_perc`` and ``vllm:cache_config_info`` (labels ``block_size``,
``num_gpu_blocks``). SGLang: ``sglang:num_queue_reqs``, ``sglang:num_running_reqs``,
``sglang:token_usage`` and ``sglang:max_total_num_tokens``. The capacity read here sizes the
index's per-worker mirror; the queue and KV usage join the gateway's own accounting, which
cannot see traffic that reaches the engine some other way (another gateway replica).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class EngineLoad:
    waiting: int | None = None
    running: int | None = None
    kv_usage: float | None = None
    block_size: int | None = None
    capacity_tokens: int | None = None


def _total(family: object) -> float:
    return sum(s.value for s in family.samples if not s.name.endswith("_created"))


def parse_engine_metrics(text: str) -> EngineLoad:
    found: dict[str, object] = {}
    for family in text_string_to_metric_families(text):
        found[family.name] = family
    load: dict[str, object] = {}
    for key, names in (("waiting", ("vllm:num_requests_waiting", "sglang:num_queue_reqs")),
                       ("running", ("vllm:num_requests_running", "sglang:num_running_reqs")),
                       ("kv_usage", ("vllm:kv_cache_usage_perc", "sglang:token_usage"))):
        family = next((found[n] for n in names if n in found), None)
        if family is not None:
            value = _total(family)
            load[key] = value if key == "kv_usage" else int(value)
    info = found.get("vllm:cache_config_info")
    if info is not None and info.samples:
        labels = info.samples[0].labels
        if labels.get("block_size", "").isdigit() and labels.get("num_gpu_blocks", "").isdigit():
            load["block_size"] = int(labels["block_size"])
            load["capacity_tokens"] = int(labels["num_gpu_blocks"]) * load["block_size"]
    sglang_capacity = found.get("sglang:max_total_num_tokens")
    if sglang_capacity is not None:
        load["capacity_tokens"] = int(_total(sglang_capacity))
    return EngineLoad(**load)
