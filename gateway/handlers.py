"""HTTP endpoints: thin wrappers that parse, then hand the request to the Gateway."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.api.errors import ApiError, bad_request
from gateway.api.openai import decode_json, parse_chat, parse_completion
from gateway.service import Gateway, models_payload


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


async def chat_completions(request: Request) -> Response:
    raw = await request.body()
    parsed = parse_chat(decode_json(raw))
    return await _gateway(request).serve(parsed, raw, "/v1/chat/completions",
                                         request.state.request_id)


async def completions(request: Request) -> Response:
    raw = await request.body()
    parsed = parse_completion(decode_json(raw))
    return await _gateway(request).serve(parsed, raw, "/v1/completions",
                                         request.state.request_id)


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
            "backlog_s": round(view.backlog_s, 6) if view else 0.0,
            "indexed_blocks": index.blocks_held(w.slot), "capacity_blocks": w.capacity_blocks,
            "requests_total": w.requests_total, "errors_total": w.errors_total,
        })
    return _json({"policy": gateway.router.policy.name, "block_size": fleet.block_size,
                  "utilization": round(fleet.utilization(), 6), "workers": rows})


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
    gateway.router.remove_worker(worker_id)
    return Response(status_code=204)
