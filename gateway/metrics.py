"""Prometheus metrics of one gateway, in its own registry (no process-global state).

Counters and histograms are updated on the request path; fleet and index state is read at
scrape time by a collector, so routing never pays for gauges.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.router import Router
from gateway.tokenize import ChatTokenizer

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                   20, 40, 80, 160, 320, 640)
FAST_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25)


class GatewayMetrics:
    def __init__(self, router: Router, tokenizer: ChatTokenizer | None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("radixgate_requests", "Requests answered, by endpoint and "
                                "HTTP status.", ["endpoint", "status"], registry=r)
        self.duration = Histogram("radixgate_request_duration_seconds", "Time from request "
                                  "to the last byte.", ["endpoint"], buckets=LATENCY_BUCKETS,
                                  registry=r)
        self.ttft = Histogram("radixgate_time_to_first_token_seconds", "Streamed requests: "
                              "time from request to the first upstream chunk.", ["endpoint"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("radixgate_routing_decisions", "Routing decisions by policy "
                                 "and reason (cache, spill, load, ...).",
                                 ["policy", "reason"], registry=r)
        self.prompt_tokens = Counter("radixgate_prompt_tokens", "Prompt tokens routed.",
                                     registry=r)
        self.predicted_cached = Counter("radixgate_predicted_cached_tokens", "Prompt tokens "
                                        "the index predicted cached on the chosen worker.",
                                        registry=r)
        self.reported_cached = Counter("radixgate_cached_tokens", "Prompt tokens the engines "
                                       "reported served from cache (usage.cached_tokens).",
                                       registry=r)
        self.tenant_requests = Counter("radixgate_tenant_requests", "Requests by tenant.",
                                       ["tenant"], registry=r)
        self.tenant_prompt_tokens = Counter("radixgate_tenant_prompt_tokens", "Prompt tokens "
                                            "by tenant.", ["tenant"], registry=r)
        self.tenant_cached_tokens = Counter("radixgate_tenant_cached_tokens", "Cached prompt "
                                            "tokens (engine-reported) by tenant.", ["tenant"],
                                            registry=r)
        self.retries = Counter("radixgate_upstream_retries", "Requests re-routed before the "
                               "first byte, by worker.", ["worker"], registry=r)
        self.upstream_errors = Counter("radixgate_upstream_errors", "Upstream failures, by "
                                       "worker.", ["worker"], registry=r)
        self.tokenize_seconds = Histogram("radixgate_tokenize_seconds", "Chat template and "
                                          "tokenization time per request.",
                                          buckets=FAST_BUCKETS, registry=r)
        self.route_seconds = Histogram("radixgate_route_seconds", "Block keys, index match, "
                                       "policy and index insert per request.",
                                       buckets=FAST_BUCKETS, registry=r)
        r.register(_StateCollector(router, tokenizer))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, router: Router, tokenizer: ChatTokenizer | None) -> None:
        self.router = router
        self.tokenizer = tokenizer

    def collect(self) -> Iterator:
        fleet, index = self.router.fleet, self.router.index
        view = {w.worker_id: w for w in fleet.view().workers}
        healthy = GaugeMetricFamily("radixgate_worker_healthy", "1 if the worker takes "
                                    "traffic.", labels=["worker"])
        in_flight = GaugeMetricFamily("radixgate_worker_in_flight", "In-flight requests.",
                                      labels=["worker"])
        backlog = GaugeMetricFamily("radixgate_worker_backlog_seconds", "Predicted queued "
                                    "prefill work.", labels=["worker"])
        blocks = GaugeMetricFamily("radixgate_index_blocks", "Blocks the index attributes to "
                                   "the worker.", labels=["worker"])
        for w in fleet.workers:
            healthy.add_metric([w.id], 1.0 if w.healthy else 0.0)
            in_flight.add_metric([w.id], w.in_flight)
            backlog.add_metric([w.id], view[w.id].backlog_s if w.id in view else 0.0)
            blocks.add_metric([w.id], index.blocks_held(w.slot))
        events = GaugeMetricFamily("radixgate_worker_events_live", "1 if the worker's KV-event "
                                   "stream is live (precise index), 0 if it is degraded or "
                                   "connecting.", labels=["worker"])
        applied = CounterMetricFamily("radixgate_kv_event_batches", "KV-event batches applied "
                                      "to the index.", labels=["worker"])
        restarts = CounterMetricFamily("radixgate_kv_event_restarts", "Engine restarts seen "
                                       "in the event sequence.", labels=["worker"])
        for w in fleet.workers:
            if w.events is not None:
                events.add_metric([w.id], 1.0 if w.events.live else 0.0)
                applied.add_metric([w.id], w.events.batches)
                restarts.add_metric([w.id], w.events.restarts)
        yield from (healthy, in_flight, backlog, blocks, events, applied, restarts)
        stats = index.stats()
        yield GaugeMetricFamily("radixgate_index_nodes", "Radix tree nodes.", value=stats.nodes)
        yield GaugeMetricFamily("radixgate_index_entries", "Block-worker entries indexed.",
                                value=stats.entries)
        yield GaugeMetricFamily("radixgate_fleet_utilization", "Recent prefill work per "
                                "worker-second.", value=fleet.utilization())
        if self.tokenizer is not None:
            hits, misses = self.tokenizer.cache_stats()
            pieces = CounterMetricFamily("radixgate_tokenizer_pieces", "Prompt pieces by "
                                         "tokenizer cache outcome.", labels=["outcome"])
            pieces.add_metric(["hit"], hits)
            pieces.add_metric(["miss"], misses)
            yield pieces
