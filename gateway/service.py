"""Gateway: one request as a straight line of named steps.

    parse → resolve model → tokenize → check context → route → forward → record

Each step is a method short enough to read on one screen; the HTTP handlers in
``gateway/handlers.py`` build a :class:`Call` and hand it to :meth:`Gateway.serve`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import orjson
from starlette.responses import Response

from gateway.api.anthropic import CacheBreakpoint
from gateway.api.errors import ApiError, no_healthy_worker, not_found_model, upstream_failed
from gateway.api.openai import ParsedRequest, check_context
from gateway.api.shapes import ReplyShape
from gateway.chat_template import ChatInputError
from gateway.config import GatewayConfig
from gateway.events_hub import EventHub
from gateway.health import HealthMonitor
from gateway.hints import Hints
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


@dataclass(slots=True)
class Call:
    """One API call: the parsed request, what goes to the engine, and how to answer."""

    parsed: ParsedRequest
    engine_body: bytes
    path: str
    """The engine endpoint (``/v1/chat/completions`` or ``/v1/completions``)."""
    request_id: str
    hints: Hints
    shape: ReplyShape
    breakpoints: list[CacheBreakpoint] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)


class Gateway:
    def __init__(self, config: GatewayConfig, router: Router, tokenizer: ChatTokenizer,
                 upstream: Upstream, metrics: GatewayMetrics, health: HealthMonitor,
                 events: EventHub) -> None:
        self.config = config
        self.router = router
        self.tokenizer = tokenizer
        self.upstream = upstream
        self.metrics = metrics
        self.health = health
        self.events = events

    async def serve(self, call: Call) -> Response:
        target = self.resolve_model(call.parsed.model)
        tokens = await self.tokenize(call.parsed)
        prompt_tokens = len(tokens) // 4
        check_context(prompt_tokens, call.parsed.max_tokens, target.max_model_len,
                      "messages" if call.parsed.kind == "chat" else "prompt")
        keys = self.router.keys(tokens, namespace=f"{target.name}\x00{call.hints.salt or ''}")
        keep = await self.breakpoint_blocks(call, tokens)
        return await self.forward(call, target, keys, prompt_tokens, keep)

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

    async def breakpoint_blocks(self, call: Call, tokens: TokenBytes) -> list[tuple[int, int]]:
        """``cache_control`` breakpoints as (prefix blocks, TTL seconds); the last one's
        token count also shapes the cache usage reported to an Anthropic client."""
        held = []
        kwargs = {k: v for k, v in call.parsed.template_kwargs.items() if k == "tools"}
        for bp in call.breakpoints:
            prefix = call.parsed.messages[:bp.messages]
            try:
                text = self.tokenizer.render(prefix, add_generation_prompt=False,
                                             **(kwargs if bp.tools else {})) if prefix else ""
            except ChatInputError:
                continue  # a prefix the template will not render alone: no pin for it
            ids = await self.tokenizer.encode_async(text) if text else b""
            common = _common_prefix(ids, tokens) // 4
            held.append((common // self.router.block_size, bp.ttl_s))
            call.shape.note_breakpoint(common)
        return held

    def route(self, call: Call, target: ModelTarget, keys: bytes, prompt_tokens: int,
              exclude: set[WorkerId]) -> Route:
        started = time.perf_counter()
        route = self.router.route(
            keys, prompt_tokens, call.parsed.max_tokens or self.config.default_max_tokens,
            affinity_key=call.hints.affinity_key, first_token_signal=call.parsed.stream,
            exclude=exclude, eligible=target.workers,
        )
        if route is None:
            raise no_healthy_worker()
        self.metrics.route_seconds.observe(time.perf_counter() - started)
        self.metrics.decisions.labels(self.router.policy.name, route.decision.reason).inc()
        return route

    async def forward(self, call: Call, target: ModelTarget, keys: bytes, prompt_tokens: int,
                      keep: list[tuple[int, int]]) -> Response:
        """Send to the chosen worker; before the first byte, re-route on failure."""
        failed: set[WorkerId] = set()
        detail = "no attempt"
        for _ in range(self.config.max_attempts):
            route = self.route(call, target, keys, prompt_tokens, failed)
            try:
                reply = await open_reply(self.upstream, route.worker.url + call.path,
                                         call.engine_body,
                                         {"content-type": "application/json",
                                          "x-request-id": call.request_id})
                for blocks, ttl_s in keep:  # the worker has the prompt: hold its breakpoints
                    self.router.keep(route, blocks, ttl_s)
                if call.parsed.stream and reply.status == 200:
                    self.router.first_token(route)
                    self.metrics.ttft.labels(call.path).observe(
                        time.perf_counter() - call.started)
                    return self.relay(call, reply, route, prompt_tokens)
                body = await reply.read_all()
            except UpstreamFailure as failure:
                detail = failure.detail
                self.worker_failed(route, failure)
                failed.add(route.worker.id)
                if not failure.retryable:
                    break
                continue
            except BaseException:  # cancelled (client gone) or a bug: free the claim
                self.router.finish(route, ok=False)
                raise
            return self.respond(call, reply, body, route, prompt_tokens)
        raise upstream_failed(detail)

    def worker_failed(self, route: Route, failure: UpstreamFailure) -> None:
        self.router.finish(route, ok=False)
        self.metrics.upstream_errors.labels(route.worker.id).inc()
        if failure.retryable:
            self.metrics.retries.labels(route.worker.id).inc()
            if self.router.fleet.mark(route.worker, ok=False):
                log.warning("worker %s is down: %s", route.worker.id, failure.detail)

    def respond(self, call: Call, reply: UpstreamReply, body: bytes, route: Route,
                prompt_tokens: int) -> Response:
        """A complete (non-streamed, or error) reply from the engine."""
        self.router.finish(route, ok=reply.status < 500)
        sniffer = UsageSniffer()
        if reply.status == 200:
            sniffer.feed_json(body)
        self.record(call, route, reply.status, prompt_tokens, sniffer)
        headers = reply.headers() | self.route_headers(call, route, prompt_tokens)
        return call.shape.complete(reply.status, body, headers)

    def relay(self, call: Call, reply: UpstreamReply, route: Route, prompt_tokens: int
              ) -> RelayResponse:
        """A streamed reply, relayed (or translated) chunk by chunk."""
        sniffer = UsageSniffer()

        def finished(ok: bool, status: int) -> None:
            self.router.finish(route, ok=ok)
            self.record(call, route, status, prompt_tokens, sniffer)

        headers = reply.headers() | self.route_headers(call, route, prompt_tokens)
        headers["content-type"] = call.shape.content_type
        return RelayResponse(reply, headers, sniffer.feed, finished, call.shape.stream())

    def record(self, call: Call, route: Route, status: int, prompt_tokens: int,
               sniffer: UsageSniffer) -> None:
        m, tenant = self.metrics, call.hints.tenant
        m.requests.labels(call.path, str(status)).inc()
        m.duration.labels(call.path).observe(time.perf_counter() - call.started)
        m.prompt_tokens.inc(prompt_tokens)
        m.predicted_cached.inc(route.decision.cached_tokens)
        m.tenant_requests.labels(tenant).inc()
        m.tenant_prompt_tokens.labels(tenant).inc(prompt_tokens)
        if sniffer.cached_tokens is not None:
            m.reported_cached.inc(sniffer.cached_tokens)
            m.tenant_cached_tokens.labels(tenant).inc(sniffer.cached_tokens)

    @staticmethod
    def route_headers(call: Call, route: Route, prompt_tokens: int) -> dict[str, str]:
        return {"x-radixgate-worker": route.worker.id,
                "x-radixgate-prefix-tokens": str(route.decision.cached_tokens),
                "x-radixgate-prompt-tokens": str(prompt_tokens),
                "x-request-id": call.request_id}


def _common_prefix(a: bytes, b: bytes) -> int:
    """Bytes shared at the start of ``a`` and ``b``, in whole 4-byte token ids."""
    n = min(len(a), len(b)) // 4 * 4
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n // 4  # binary search on token equality of prefixes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid * 4] == b[:mid * 4]:
            lo = mid
        else:
            hi = mid - 1
    return lo * 4


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
