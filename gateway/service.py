"""Gateway: one request as a straight line of named steps.

    parse → resolve model → tokenize → check context → route → forward → record

Each step is a method short enough to read on one screen; the HTTP handlers in
``gateway/handlers.py`` only call :meth:`Gateway.serve`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import orjson
from starlette.responses import Response

from gateway.api.errors import ApiError, no_healthy_worker, not_found_model, upstream_failed
from gateway.api.openai import ParsedRequest, check_context
from gateway.chat_template import ChatInputError
from gateway.config import GatewayConfig
from gateway.health import HealthMonitor
from gateway.metrics import GatewayMetrics
from gateway.policy.base import WorkerId
from gateway.proxy import (
    RelayResponse,
    Upstream,
    UpstreamFailure,
    UpstreamReply,
    UsageSniffer,
    open_reply,
)
from gateway.router import Route, Router
from gateway.tokenize import ChatTokenizer, TokenBytes, ids_to_bytes

log = logging.getLogger(__name__)

FALLBACK_MAX_MODEL_LEN = 32768


@dataclass(frozen=True, slots=True)
class ModelTarget:
    name: str
    max_model_len: int
    workers: frozenset[WorkerId] | None
    """Workers serving the model; ``None``: every worker (the model is configured)."""


class Gateway:
    def __init__(self, config: GatewayConfig, router: Router, tokenizer: ChatTokenizer,
                 upstream: Upstream, metrics: GatewayMetrics, health: HealthMonitor) -> None:
        self.config = config
        self.router = router
        self.tokenizer = tokenizer
        self.upstream = upstream
        self.metrics = metrics
        self.health = health

    async def serve(self, parsed: ParsedRequest, raw_body: bytes, path: str,
                    request_id: str) -> Response:
        started = time.perf_counter()
        target = self.resolve_model(parsed.model)
        tokens = await self.tokenize(parsed)
        prompt_tokens = len(tokens) // 4
        check_context(prompt_tokens, parsed.max_tokens, target.max_model_len,
                      "messages" if parsed.kind == "chat" else "prompt")
        keys = self.router.keys(tokens, namespace=target.name)
        return await self.forward(parsed, target, keys, prompt_tokens, raw_body, path,
                                  request_id, started)

    # -- steps -------------------------------------------------------------------------
    def resolve_model(self, name: str) -> ModelTarget:
        """The requested model, which workers serve it, and its context length."""
        fleet = self.router.fleet
        if self.config.model is not None:
            if name != self.config.model:
                raise not_found_model(name, [self.config.model])
            limit = self.config.max_model_len or FALLBACK_MAX_MODEL_LEN
            return ModelTarget(name, limit, None)
        serving = [w for w in fleet.healthy() if name in w.models]
        if not serving:
            known = sorted({m for w in fleet.workers for m in w.models})
            if name in known or not fleet.healthy():
                raise no_healthy_worker()
            raise not_found_model(name, known)
        lengths = [w.models[name] for w in serving if w.models[name]]
        limit = self.config.max_model_len or min(lengths, default=FALLBACK_MAX_MODEL_LEN)
        return ModelTarget(name, limit, frozenset(w.id for w in serving))

    async def tokenize(self, parsed: ParsedRequest) -> TokenBytes:
        """The prompt's token ids, exactly as the engine will compute them."""
        started = time.perf_counter()
        try:
            if parsed.kind == "chat":
                tokens = await self.tokenizer.encode_chat(parsed.messages,
                                                          **parsed.template_kwargs)
            elif isinstance(parsed.prompt, str):
                tokens = await self.tokenizer.encode_async(parsed.prompt,
                                                           add_special_tokens=True)
            else:
                tokens = ids_to_bytes(parsed.prompt or [])
        except ChatInputError as exc:
            raise ApiError(400, str(exc), param=exc.param) from None
        self.metrics.tokenize_seconds.observe(time.perf_counter() - started)
        return tokens

    def route(self, parsed: ParsedRequest, target: ModelTarget, keys: bytes,
              prompt_tokens: int, exclude: set[WorkerId]) -> Route:
        started = time.perf_counter()
        route = self.router.route(
            keys, prompt_tokens, parsed.max_tokens or self.config.default_max_tokens,
            first_token_signal=parsed.stream, exclude=exclude, eligible=target.workers,
        )
        if route is None:
            raise no_healthy_worker()
        self.metrics.route_seconds.observe(time.perf_counter() - started)
        self.metrics.decisions.labels(self.router.policy.name, route.decision.reason).inc()
        return route

    async def forward(self, parsed: ParsedRequest, target: ModelTarget, keys: bytes,
                      prompt_tokens: int, raw_body: bytes, path: str, request_id: str,
                      started: float) -> Response:
        """Send to the chosen worker; before the first byte, re-route on failure."""
        failed: set[WorkerId] = set()
        detail = "no attempt"
        for _ in range(self.config.max_attempts):
            route = self.route(parsed, target, keys, prompt_tokens, failed)
            try:
                reply = await open_reply(self.upstream, route.worker.url + path, raw_body,
                                         {"content-type": "application/json",
                                          "x-request-id": request_id})
                if parsed.stream and reply.status == 200:
                    self.router.first_token(route)
                    self.metrics.ttft.labels(path).observe(time.perf_counter() - started)
                    return self.relay(reply, route, path, request_id, started, prompt_tokens)
                body = await reply.read_all()
            except UpstreamFailure as failure:
                detail = failure.detail
                self.worker_failed(route, failure)
                failed.add(route.worker.id)
                if not failure.retryable:
                    break
                continue
            return self.respond(reply, body, route, path, request_id, started, prompt_tokens)
        raise upstream_failed(detail)

    def worker_failed(self, route: Route, failure: UpstreamFailure) -> None:
        fleet = self.router.fleet
        self.router.finish(route, ok=False)
        self.metrics.upstream_errors.labels(route.worker.id).inc()
        if failure.retryable:
            self.metrics.retries.labels(route.worker.id).inc()
            if fleet.mark(route.worker, ok=False):
                log.warning("worker %s is down: %s", route.worker.id, failure.detail)

    def respond(self, reply: UpstreamReply, body: bytes, route: Route, path: str,
                request_id: str, started: float, prompt_tokens: int) -> Response:
        """A complete (non-streamed, or error) reply from the engine."""
        self.router.finish(route, ok=reply.status < 500)
        sniffer = UsageSniffer()
        if reply.status == 200:
            sniffer.feed_json(body)
        self.record(route, reply.status, path, started, prompt_tokens, sniffer)
        headers = reply.headers() | self.route_headers(route, request_id, prompt_tokens)
        return Response(body, status_code=reply.status, headers=headers)

    def relay(self, reply: UpstreamReply, route: Route, path: str, request_id: str,
              started: float, prompt_tokens: int) -> RelayResponse:
        """A streamed reply, relayed chunk by chunk."""
        sniffer = UsageSniffer()

        def finished(ok: bool) -> None:
            self.router.finish(route, ok=ok)
            self.record(route, 200 if ok else 499, path, started, prompt_tokens, sniffer)

        headers = reply.headers() | self.route_headers(route, request_id, prompt_tokens)
        return RelayResponse(reply, headers, sniffer.feed, finished)

    def record(self, route: Route, status: int, path: str, started: float,
               prompt_tokens: int, sniffer: UsageSniffer) -> None:
        m = self.metrics
        m.requests.labels(path, str(status)).inc()
        m.duration.labels(path).observe(time.perf_counter() - started)
        m.prompt_tokens.inc(prompt_tokens)
        m.predicted_cached.inc(route.decision.cached_tokens)
        if sniffer.cached_tokens is not None:
            m.reported_cached.inc(sniffer.cached_tokens)

    @staticmethod
    def route_headers(route: Route, request_id: str, prompt_tokens: int) -> dict[str, str]:
        return {"x-radixgate-worker": route.worker.id,
                "x-radixgate-prefix-tokens": str(route.decision.cached_tokens),
                "x-radixgate-prompt-tokens": str(prompt_tokens),
                "x-request-id": request_id}


def models_payload(gateway: Gateway) -> bytes:
    """``GET /v1/models`` in OpenAI's shape."""
    config, fleet = gateway.config, gateway.router.fleet
    if config.model is not None:
        names = {config.model: config.max_model_len or FALLBACK_MAX_MODEL_LEN}
    else:
        names = {}
        for w in fleet.healthy():
            for name, limit in w.models.items():
                names.setdefault(name, limit)
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "radixgate",
             "max_model_len": limit} for n, limit in sorted(names.items())]
    return orjson.dumps({"object": "list", "data": data})
