"""``radixgate sim``: the HTTP face of one simulated engine, speaking vLLM's API.

OpenAI chat and completions (streamed or not, token-id prompts, ``cache_salt``,
``ignore_eos``), ``/v1/models``, ``/health``, ``/version``, ``/tokenize``,
``/reset_prefix_cache`` and vLLM's metric names on ``/metrics``. Prompts are tokenized with
the same chat template and tokenizer as the gateway, so both count the same tokens; the
cache and timing come from :class:`workers.sim.model.EngineModel`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.api.errors import ApiError
from gateway.api.openai import ParsedRequest, decode_json, parse_chat, parse_completion
from gateway.chat_template import ChatInputError
from gateway.config import default_tokenizer
from gateway.tokenize import ChatTokenizer, TokenBytes, bytes_to_ids, ids_to_bytes
from gateway.tokenizer_files import resolve_tokenizer
from workers.sim import responses as shapes
from workers.sim.engine_loop import EngineLoop
from workers.sim.kv_events import KVEventPublisher
from workers.sim.metrics import SimMetrics
from workers.sim.model import EngineConfig, EngineModel, SimRequest, TokenOut
from workers.sim.text import OutputVocab, natural_length, prompt_seed


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8100
    model_name: str = "qwen3"
    tokenizer: str = field(default_factory=default_tokenizer)
    max_model_len: int = 32768
    engine: EngineConfig = field(default_factory=EngineConfig)
    speed: float = 1.0
    output_min: int = 16
    output_max: int = 256
    flavor: str = "vllm"
    """Which engine it imitates on the wire: ``vllm`` or ``sglang`` (KV events, extras)."""
    kv_events: bool = True
    kv_events_port: int = 0
    """0: any free port (advertised by ``/kv_event_sources`` / ``/get_server_info``)."""


class SimError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


class SimServer:
    def __init__(self, config: SimConfig, tokenizer: ChatTokenizer | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer or ChatTokenizer.from_dir(resolve_tokenizer(config.tokenizer))
        self.salts: dict[int, str] = {}
        self.publisher = self._publisher(config)
        listener = self.publisher.on_pool_event if self.publisher else None
        self.model = EngineModel(config.engine, listener=listener)
        self.loop = EngineLoop(self.model, config.speed,
                               after_step=self.publisher.flush if self.publisher else None)
        self.metrics = SimMetrics(self.model, config.model_name, config.flavor)
        self.vocab = OutputVocab(self.tokenizer._tok)
        self.created = int(time.time())

    def _publisher(self, config: SimConfig) -> KVEventPublisher | None:
        if not config.kv_events:
            return None
        port = config.kv_events_port or "*"
        replay = f"tcp://{config.host}:{config.kv_events_port + 1}" if config.kv_events_port \
            else f"tcp://{config.host}:*"
        return KVEventPublisher(config.flavor, f"tcp://{config.host}:{port}", replay,
                                f"kv@{config.port}", config.engine.block_size,
                                salt_of=self.salts.get)

    def event_config(self) -> dict | None:
        """The publisher as an engine advertises it (the engine binds: wildcard host)."""
        if self.publisher is None:
            return None
        port = self.publisher.endpoint.rsplit(":", 1)[1]
        replay = self.publisher.replay_address
        return {"enable_kv_cache_events": True, "publisher": "zmq",
                "endpoint": f"tcp://*:{port}",
                "replay_endpoint": f"tcp://*:{replay.rsplit(':', 1)[1]}" if replay else None,
                "buffer_steps": 10000, "topic": f"kv@{self.config.port}"}

    def submit(self, request: SimRequest) -> asyncio.Queue[TokenOut]:
        queue = self.loop.submit(request)
        if request.salt and request.hashes:
            if len(self.salts) > 100_000:
                self.salts.clear()
            self.salts[request.hashes[0]] = request.salt
        return queue

    # -- request handling --------------------------------------------------------------
    async def parse(self, request: Request, chat: bool) -> tuple[ParsedRequest, TokenBytes]:
        try:
            body = decode_json(await request.body())
            parsed = parse_chat(body) if chat else parse_completion(body)
        except ApiError as exc:
            raise SimError(exc.status, exc.message, exc.param) from None
        if parsed.model != self.config.model_name:
            raise SimError(404, f"The model `{parsed.model}` does not exist. Valid aliases: "
                           f"{self.config.model_name}.", "model")
        try:
            if chat:
                tokens = await self.tokenizer.encode_chat(parsed.messages,
                                                          **parsed.template_kwargs)
            elif isinstance(parsed.prompt, str):
                tokens = await self.tokenizer.encode_async(parsed.prompt, add_special_tokens=True)
            else:
                tokens = ids_to_bytes(parsed.prompt or [])
        except ChatInputError as exc:
            raise SimError(400, str(exc), exc.param) from None
        return parsed, tokens

    def make_request(self, parsed: ParsedRequest, tokens: TokenBytes
                     ) -> tuple[SimRequest, str]:
        cfg = self.config
        n = len(tokens) // 4
        limit = cfg.max_model_len
        if n >= limit or (parsed.max_tokens and n + parsed.max_tokens > limit):
            raise SimError(400, f"This model's maximum context length is {limit} tokens. "
                           f"However, your prompt contains {n} input tokens and requested "
                           f"{parsed.max_tokens or 0} output tokens.", "input_tokens")
        if -(-n // cfg.engine.block_size) > cfg.engine.num_blocks:
            raise SimError(400, "The prompt does not fit in this engine's KV cache.",
                           "input_tokens")
        salt = parsed.body.get("cache_salt")
        if salt is not None and not (isinstance(salt, str) and 0 < len(salt) <= 128):
            raise SimError(400, "cache_salt must be a string of 1 to 128 characters.",
                           "cache_salt")
        max_tokens = parsed.max_tokens or (limit - n)
        seed = prompt_seed(tokens)
        natural = natural_length(seed, cfg.output_min, cfg.output_max)
        if parsed.body.get("ignore_eos") is True or natural >= max_tokens:
            out, finish = max_tokens, "length"
        else:
            out, finish = natural, "stop"
        request = SimRequest(shapes.new_id("req"), tokens, out, self.loop.now(), salt)
        return request, finish

    def observe_first_token(self, request: SimRequest) -> None:
        if request.first_token_at is not None:
            self.metrics.ttft.observe(request.first_token_at - request.arrival)

    async def collect(self, request: SimRequest, queue: asyncio.Queue[TokenOut],
                      http: Request) -> list[TokenOut]:
        """All tokens of a non-streamed request; a client that goes away aborts it."""
        outs: list[TokenOut] = []
        watcher = asyncio.create_task(_wait_disconnect(http))
        try:
            while not outs or not outs[-1].finished:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, watcher},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    raise asyncio.CancelledError
                outs.append(getter.result())
                if len(outs) == 1:
                    self.observe_first_token(request)
            return outs
        finally:
            watcher.cancel()
            self.loop.abort(request)

    async def generate(self, http: Request, chat: bool) -> Response:
        parsed, tokens = await self.parse(http, chat)
        request, finish = self.make_request(parsed, tokens)
        queue = self.submit(request)
        seed = prompt_seed(tokens)
        rid = shapes.new_id("chatcmpl" if chat else "cmpl")
        if parsed.stream:
            options = parsed.body.get("stream_options") or {}
            return StreamingResponse(
                self.stream(request, queue, seed, rid, chat, finish,
                            bool(options.get("include_usage"))),
                media_type="text/event-stream; charset=utf-8")
        outs = await self.collect(request, queue, http)
        text = "".join(self.vocab.token(seed, o.index)[1] for o in outs)
        use = shapes.usage(request.prompt_tokens, len(outs), request.cached_tokens or 0)
        build = shapes.chat_body if chat else shapes.completion_body
        body = build(rid, self.config.model_name, text, finish, use)
        self.metrics.e2e.observe(self.loop.now() - request.arrival)
        return Response(orjson.dumps(body), media_type="application/json")

    async def stream(self, request: SimRequest, queue: asyncio.Queue[TokenOut], seed: int,
                     rid: str, chat: bool, finish: str, include_usage: bool
                     ) -> AsyncIterator[bytes]:
        writer = shapes.ChunkWriter(rid, self.config.model_name, chat)
        try:
            while True:
                out = await queue.get()
                if out.index == 0:
                    self.observe_first_token(request)
                    if chat:
                        yield writer.role()
                text = self.vocab.token(seed, out.index)[1]
                yield writer.token(text, finish if out.finished else None)
                if out.finished:
                    break
            if include_usage:
                yield writer.usage(shapes.usage(request.prompt_tokens, request.generated,
                                                request.cached_tokens or 0))
            yield shapes.DONE
            self.metrics.e2e.observe(self.loop.now() - request.arrival)
        finally:
            self.loop.abort(request)

    async def generate_native(self, http: Request) -> Response:
        """SGLang's native ``/generate``: ``text`` or ``input_ids``, ``sampling_params``."""
        body = decode_json(await http.body())
        params = body.get("sampling_params") or {}
        if isinstance(body.get("input_ids"), list):
            tokens = ids_to_bytes(body["input_ids"])
        elif isinstance(body.get("text"), str):
            tokens = await self.tokenizer.encode_async(body["text"], add_special_tokens=True)
        else:
            raise SimError(400, "give 'text' or 'input_ids'", "text")
        max_new = params.get("max_new_tokens") or 128
        parsed = ParsedRequest("completion", {"ignore_eos": params.get("ignore_eos")},
                               self.config.model_name, bool(body.get("stream")),
                               int(max_new))
        request, finish = self.make_request(parsed, tokens)
        queue = self.submit(request)
        seed = prompt_seed(tokens)
        outs = await self.collect(request, queue, http)
        text = "".join(self.vocab.token(seed, o.index)[1] for o in outs)
        meta = {"id": request.request_id, "prompt_tokens": request.prompt_tokens,
                "completion_tokens": len(outs), "cached_tokens": request.cached_tokens or 0,
                "finish_reason": {"type": finish}}
        return Response(orjson.dumps({"text": text, "meta_info": meta}),
                        media_type="application/json")

    # -- small endpoints ---------------------------------------------------------------
    def models(self) -> dict:
        card = {"id": self.config.model_name, "object": "model", "created": self.created,
                "owned_by": "vllm", "root": self.config.model_name, "parent": None,
                "max_model_len": self.config.max_model_len}
        return {"object": "list", "data": [card]}

    async def tokenize(self, http: Request) -> dict:
        body = decode_json(await http.body())
        _, tokens = await self.parse_for_tokenize(body, chat="messages" in body)
        ids = bytes_to_ids(tokens)
        return {"count": len(ids), "max_model_len": self.config.max_model_len, "tokens": ids,
                "token_strs": None}

    async def parse_for_tokenize(self, body: dict, chat: bool
                                 ) -> tuple[ParsedRequest, TokenBytes]:
        body = {"model": self.config.model_name, **body}
        parsed = parse_chat(body) if chat else parse_completion(body)
        if chat:
            return parsed, await self.tokenizer.encode_chat(parsed.messages,
                                                            **parsed.template_kwargs)
        if isinstance(parsed.prompt, str):
            return parsed, await self.tokenizer.encode_async(parsed.prompt,
                                                             add_special_tokens=True)
        return parsed, ids_to_bytes(parsed.prompt or [])


async def _wait_disconnect(http: Request) -> None:
    while True:
        message = await http.receive()
        if message["type"] == "http.disconnect":
            return


def create_sim_app(config: SimConfig, tokenizer: ChatTokenizer | None = None) -> Starlette:
    sim = SimServer(config, tokenizer)

    def json(payload: object, status: int = 200) -> Response:
        return Response(orjson.dumps(payload), status, media_type="application/json")

    async def chat(http: Request) -> Response:
        return await sim.generate(http, chat=True)

    async def completions(http: Request) -> Response:
        return await sim.generate(http, chat=False)

    async def models(http: Request) -> Response:
        return json(sim.models())

    async def health(http: Request) -> Response:
        return Response(b"", 200)

    async def version(http: Request) -> Response:
        return json({"version": shapes.FINGERPRINT})

    async def tokenize(http: Request) -> Response:
        return json(await sim.tokenize(http))

    async def reset(http: Request) -> Response:
        ok = sim.model.reset_prefix_cache()
        return json({"success": ok}, 200 if ok else 409)

    async def generate(http: Request) -> Response:
        return await sim.generate_native(http)

    async def kv_event_sources(http: Request) -> Response:
        config = sim.event_config()
        return json({"0": config} if config else {})

    async def server_info(http: Request) -> Response:  # SGLang's name for its config
        config = sim.event_config()
        return json({"model_path": config and sim.config.model_name,
                     "page_size": sim.config.engine.block_size,
                     "max_total_num_tokens": sim.config.engine.num_blocks
                     * sim.config.engine.block_size,
                     "kv_events_config": orjson.dumps(config).decode() if config else None})

    async def metrics(http: Request) -> Response:
        return Response(sim.metrics.render(), media_type="text/plain; version=0.0.4")

    async def sim_error(http: Request, exc: Exception) -> Response:
        assert isinstance(exc, SimError)
        return Response(shapes.error_body(exc.status, exc.message, exc.param), exc.status,
                        media_type="application/json")

    async def api_error(http: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return Response(shapes.error_body(exc.status, exc.message, exc.param), exc.status,
                        media_type="application/json")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if sim.publisher is not None:
            sim.publisher.start()
        sim.loop.start()
        try:
            yield
        finally:
            await sim.loop.stop()
            if sim.publisher is not None:
                await sim.publisher.aclose()
            sim.tokenizer.close()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/version", version, methods=["GET"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/reset_prefix_cache", reset, methods=["POST"]),
            Route("/flush_cache", reset, methods=["POST", "GET"]),
            Route("/generate", generate, methods=["POST"]),
            Route("/kv_event_sources", kv_event_sources, methods=["GET"]),
            Route("/get_server_info", server_info, methods=["GET"]),
            Route("/server_info", server_info, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        exception_handlers={SimError: sim_error, ApiError: api_error},
        lifespan=lifespan,
    )
    app.state.sim = sim
    return app
