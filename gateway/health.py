"""HealthMonitor: active health checks of every worker, and what they learn on the way.

Every ``interval_s`` each worker's ``GET /health`` is probed; ``fail_threshold`` failures in
a row take it out of rotation, one success brings it back. A worker that comes back after
being down has most likely restarted with an empty cache, so its index entries are dropped.
A healthy worker is also asked once for ``/v1/models``: the served model names and context
length then come from the engines themselves, not from configuration that could disagree.
It is asked once, too, where it publishes KV-cache events (vLLM ``/kv_event_sources``,
SGLang ``/get_server_info``), and the gateway subscribes.
(The proxy takes a worker out at once when a connection to it is refused.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import httpx
import orjson

from gateway.fleet import Worker
from gateway.index.subscriber import EventSource
from gateway.router import Router
from gateway.scrape import parse_engine_metrics

if TYPE_CHECKING:
    from gateway.events_hub import EventHub

log = logging.getLogger(__name__)


class HealthMonitor:
    def __init__(self, router: Router, client: httpx.AsyncClient, interval_s: float = 2.0,
                 timeout_s: float = 2.0, fail_threshold: int = 2,
                 events: EventHub | None = None) -> None:
        self.router = router
        self.events = events
        self.client = client
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.fail_threshold = fail_threshold

    async def run(self) -> None:
        while True:
            try:
                await self.check_all()
            except Exception:  # a bug in one check must not end health checking
                log.exception("health check failed")
            await asyncio.sleep(self.interval_s)

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(w) for w in self.router.fleet.workers))

    async def check(self, worker: Worker) -> None:
        ok = await self._probe(worker)
        if ok and not worker.models:
            await self._learn_models(worker)
        if ok:
            await self._scrape(worker)
        if ok and worker.models and self.events is not None and self.events.enabled \
                and worker.events is None and self.router.registered(worker):
            await self._learn_events(worker)
        was_healthy = worker.healthy
        if self.router.fleet.mark(worker, ok, self.fail_threshold):
            log.warning("worker %s is %s", worker.id, "up" if worker.healthy else "down")
            if worker.healthy and not was_healthy:
                self.router.worker_restarted(worker)

    async def _probe(self, worker: Worker) -> bool:
        try:
            response = await self.client.get(f"{worker.url}/health", timeout=self.timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _learn_models(self, worker: Worker) -> None:
        try:
            response = await self.client.get(f"{worker.url}/v1/models", timeout=self.timeout_s)
            cards = orjson.loads(response.content).get("data") or []
            worker.models = {c["id"]: c.get("max_model_len") for c in cards if "id" in c}
        except (httpx.HTTPError, orjson.JSONDecodeError, AttributeError, TypeError) as exc:
            log.info("worker %s: no model list (%s)", worker.id, exc)

    async def _scrape(self, worker: Worker) -> None:
        """The engine's own load and capacity (``/metrics``), when it exposes them."""
        try:
            response = await self.client.get(f"{worker.url}/metrics", timeout=self.timeout_s)
            load = parse_engine_metrics(response.text) if response.status_code == 200 \
                else None
        except (httpx.HTTPError, ValueError):
            return
        if load is None:
            return
        # Compared at the same instant as the gateway's own count: only what the gateway
        # did not send itself is external (a stale total would inflate a worker's queue).
        worker.external_waiting = max(0, (load.waiting or 0) - worker.prefilling)
        worker.engine_kv_usage = load.kv_usage or 0.0
        if load.capacity_tokens and not worker.capacity_from_engine:
            worker.capacity_from_engine = True
            if load.block_size and load.block_size % self.router.block_size:
                log.warning("worker %s uses %d-token KV blocks, not a multiple of the "
                            "gateway's %d: its KV events cannot be keyed (routing stays "
                            "approximate); set --block-size to divide it", worker.id,
                            load.block_size, self.router.block_size)
            blocks = load.capacity_tokens // self.router.block_size
            if blocks != worker.capacity_blocks:
                log.info("worker %s: KV capacity %d tokens (from the engine)", worker.id,
                         load.capacity_tokens)
                self.router.set_capacity(worker, blocks)

    async def _learn_events(self, worker: Worker) -> None:
        config = await self._get_json(worker, "/kv_event_sources")
        if isinstance(config, dict) and config:
            config = config.get("0") or next(iter(config.values()))
        else:  # SGLang advertises its publisher in the server info
            info = await self._get_json(worker, "/get_server_info")
            config = info.get("kv_events_config") if isinstance(info, dict) else None
            if isinstance(config, str):
                try:
                    config = orjson.loads(config)
                except orjson.JSONDecodeError:
                    config = None
        if not isinstance(config, dict):
            return
        host = httpx.URL(worker.url).host
        source = EventSource.from_engine(config, host)
        if source is not None:
            log.info("worker %s publishes KV events at %s", worker.id, source.endpoint)
            self.events.start(worker, source, next(iter(worker.models)))

    async def _get_json(self, worker: Worker, path: str) -> object:
        try:
            response = await self.client.get(worker.url + path, timeout=self.timeout_s)
            return orjson.loads(response.content) if response.status_code == 200 else None
        except (httpx.HTTPError, orjson.JSONDecodeError):
            return None
