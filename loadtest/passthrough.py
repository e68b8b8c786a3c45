"""A bare Starlette + httpx pass-through proxy: the floor any Python gateway pays.

``make bench`` runs it beside radixgate so that the gateway's own work (tokenize, index,
policy, accounting) can be told apart from the HTTP stack's cost on the same machine.
    python -m loadtest.passthrough PORT UPSTREAM_URL
"""

from __future__ import annotations

import sys

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def create_passthrough(upstream: str) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=60)

    async def forward(request: Request) -> Response:
        reply = await client.post(request.url.path, content=await request.body(),
                                  headers={"content-type": "application/json"})
        return Response(reply.content, reply.status_code, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(b"ok")

    return Starlette(routes=[Route("/v1/chat/completions", forward, methods=["POST"]),
                             Route("/health", health)])


if __name__ == "__main__":
    from gateway.cli import _run
    from gateway.serve import _server

    port, upstream = int(sys.argv[1]), sys.argv[2]
    _run(_server(create_passthrough(upstream), "127.0.0.1", port).serve())
