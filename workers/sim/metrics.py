"""``/metrics`` of a simulated engine under vLLM's metric names and labels, plus SGLang's
names for the SGLang flavour (``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
``sglang:token_usage``, ``sglang:max_total_num_tokens``, ``sglang:cached_tokens_total``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from workers.sim.model import EngineModel

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


class SimMetrics:
    def __init__(self, model: EngineModel, model_name: str, flavor: str = "vllm") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"engine": "0", "model_name": model_name}
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first "
                              "token in seconds.", list(self.labels), buckets=TTFT_BUCKETS,
                              registry=self.registry).labels(**self.labels)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request "
                             "latency in seconds.", list(self.labels), buckets=TTFT_BUCKETS,
                             registry=self.registry).labels(**self.labels)
        self.registry.register(_EngineCollector(model, self.labels))
        if flavor == "sglang":
            self.registry.register(_SGLangCollector(model, model_name))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    def __init__(self, model: EngineModel, labels: dict[str, str]) -> None:
        self.model = model
        self.names = list(labels)
        self.values = list(labels.values())

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=self.names)
        g.add_metric(self.values, value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=self.names)
        c.add_metric(self.values, value)
        return c

    def collect(self) -> Iterator:
        m, c = self.model, self.model.counters
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution "
                          "batches.", len(m.running))
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                          "processed.", len(m.waiting))
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                          "usage.", m.pool.usage)
        yield self._counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of "
                            "number of queried tokens.", c.prefix_queries)
        yield self._counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of "
                            "cached tokens.", c.prefix_hits)
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                            c.prompt_tokens)
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.",
                            c.generation_tokens)
        yield self._counter("vllm:num_preemptions", "Cumulative number of preemption from the "
                            "engine.", c.preemptions)
        yield self._counter("vllm:request_success", "Count of successfully processed requests.",
                            c.finished)
        cfg = m.config
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine "
                                 "CacheConfig", labels=[
                                     "block_size", "enable_prefix_caching", "engine",
                                     "num_gpu_blocks", "prefix_caching_hash_algo"])
        info.add_metric([str(cfg.block_size), "True", "0", str(cfg.num_blocks), "xxh3_64"], 1.0)
        yield info


class _SGLangCollector(Collector):
    def __init__(self, model: EngineModel, model_name: str) -> None:
        self.model = model
        self.labels = {"model_name": model_name}

    def collect(self) -> Iterator:
        m, cfg = self.model, self.model.config
        for name, doc, value in (
                ("sglang:num_running_reqs", "The number of running requests.", len(m.running)),
                ("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                 len(m.waiting)),
                ("sglang:token_usage", "The token usage.", m.pool.usage),
                ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV "
                 "cache pool.", cfg.num_blocks * cfg.block_size)):
            g = GaugeMetricFamily(name, doc, labels=list(self.labels))
            g.add_metric(list(self.labels.values()), value)
            yield g
        c = CounterMetricFamily("sglang:cached_tokens", "Number of cached prompt tokens.",
                                labels=list(self.labels))
        c.add_metric(list(self.labels.values()), m.counters.prefix_hits)
        yield c
