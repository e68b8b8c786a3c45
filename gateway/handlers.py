"""HTTP endpoints: parse, build a Call, hand it to the Gateway; admin and service routes."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.api import anthropic
from gateway.api.errors import ApiError, bad_request
from gateway.api.openai import ParsedRequest, decode_json, parse_chat, parse_completion
from gateway.api.shapes import AnthropicShape, OpenAIShape
from gateway.auth import DEFAULT_TENANT
from gateway.hints import Hints, engine_body, needs_rewrite, request_hints
from gateway.service import Call, Gateway, models_payload

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _hints(request: Request, body: dict[str, Any], user: Any = None) -> Hints:
    tenant = getattr(request.state, "tenant", DEFAULT_TENANT)
    return request_hints(body, request.headers.get("x-session-id"), tenant,
                         _gateway(request).config.cache_isolation, user)


def _openai_call(request: Request, raw: bytes, parsed: ParsedRequest, path: str) -> Call:
    hints = _hints(request, parsed.body)
    body = orjson.dumps(engine_body(parsed.body, hints)) if needs_rewrite(
        parsed.body, hints) else raw
    return Call(parsed, body, path, request.state.request_id, hints, OpenAIShape())


async def chat_completions(request: Request) -> Response:
    raw = await request.body()
    parsed = parse_chat(decode_json(raw))
    return await _gateway(request).serve(_openai_call(request, raw, parsed, CHAT))


async def completions(request: Request) -> Response:
    raw = await request.body()
    parsed = parse_completion(decode_json(raw))
    return await _gateway(request).serve(_openai_call(request, raw, parsed, COMPLETIONS))


async def messages(request: Request) -> Response:
    """Anthropic Messages, served through the engine's chat API; errors in its shape."""
    try:
        body = decode_json(await request.body())
        ask = anthropic.parse_messages_request(body)
        chat_body = anthropic.to_openai_chat(ask)
        parsed = parse_chat(chat_body)
        hints = _hints(request, body, user=ask.user_id)
        call = Call(parsed, orjson.dumps(engine_body(chat_body, hints)), CHAT,
                    request.state.request_id, hints, AnthropicShape(ask.model),
                    breakpoints=list(ask.breakpoints))
        return await _gateway(request).serve(call)
    except ApiError as exc:
        return anthropic.error_response(anthropic.from_api_error(exc))
    except anthropic.AnthropicError as exc:
        return anthropic.error_response(exc)


async def models(request: Request) -> Response:
    return Response(models_payload(_gateway(request)), media_type="application/json")


async def health(request: Request) -> Response:
    return _json({"status": "ok"})


async def ready(request: Request) -> Response:
    healthy = len(_gateway(request).router.fleet.healthy())
    return _json({"ready": healthy > 0, "healthy_workers": healthy}, 200 if healthy else 503)


async def metrics(request: Request) -> Response:
    return Response(_gateway(request).metrics.render(),
                    media_type="text/plain; version=0.0.4; charset=utf-8")


async def list_workers(request: Request) -> Response:
    gateway = _gateway(request)
    fleet, index = gateway.router.fleet, gateway.router.index
    views = {v.worker_id: v for v in fleet.view().workers}
    rows = []
    for w in fleet.workers:
        view = views.get(w.id)
        rows.append({
            "id": w.id, "url": w.url, "slot": w.slot, "healthy": w.healthy,
            "models": w.models, "in_flight_requests": w.in_flight,
            "prefilling_requests": w.prefilling, "in_flight_tokens": w.active_tokens,
            "engine_external_waiting": w.external_waiting,
            "backlog_s": round(view.backlog_s, 6) if view else 0.0,
            "indexed_blocks": index.blocks_held(w.slot), "capacity_blocks": w.capacity_blocks,
            "requests_total": w.requests_total, "errors_total": w.errors_total,
            "index_mode": "precise" if w.events is not None and w.events.live
            and gateway.router.mode != "approximate" else "approximate",
            "events": _events_status(w.events),
        })
    return _json({"policy": gateway.router.policy.name, "block_size": fleet.block_size,
                  "utilization": round(fleet.utilization(), 6),
                  "sessions": len(gateway.router.sessions),
                  "pinned_prefixes": len(gateway.router.pins), "workers": rows})


def _events_status(sub: Any) -> dict | None:
    if sub is None:
        return None
    stats = sub.ingest.stats
    return {"state": sub.state, "endpoint": sub.source.endpoint, "last_seq": sub.last_seq,
            "batches": sub.batches, "replays": sub.replays, "restarts": sub.restarts,
            "stored": stats.stored, "removed": stats.removed, "cleared": stats.cleared,
            "orphans": stats.orphans}


async def add_worker(request: Request) -> Response:
    body = decode_json(await request.body())
    url = body.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise bad_request("'url' must be an http(s) URL.", "url")
    gateway = _gateway(request)
    worker_id = body.get("id") or url.split("://", 1)[1].rstrip("/")
    capacity = body.get("capacity_blocks") or gateway.config.capacity_blocks
    if not isinstance(capacity, int) or capacity < 1:
        raise bad_request("'capacity_blocks' must be a positive integer.", "capacity_blocks")
    try:
        worker = gateway.router.add_worker(str(worker_id), url, capacity,
                                           gateway.config.max_running)
    except ValueError as exc:
        raise ApiError(409, str(exc), param="id", code="conflict") from None
    worker.healthy = False  # until its first health check passes
    await gateway.health.check(worker)
    return _json({"id": worker.id, "slot": worker.slot, "healthy": worker.healthy}, 201)


async def remove_worker(request: Request) -> Response:
    gateway = _gateway(request)
    worker_id = request.path_params["worker_id"]
    if gateway.router.fleet.get(worker_id) is None:
        raise ApiError(404, f"No worker {worker_id!r}.", param="id", code="not_found")
    await gateway.events.stop(worker_id)
    gateway.router.remove_worker(worker_id)
    return Response(status_code=204)
