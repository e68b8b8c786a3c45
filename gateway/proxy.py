"""Upstream calls to engine workers: open, relay untouched, cancel, clean up.

A reply is *committed* to the client only once the worker has sent its status line and the
first body chunk. Until then a failure (connection refused, worker died, 502/503/504) is
``retryable``: nothing reached the client, so the request can go to another worker. After
that, bytes are relayed chunk by chunk as they arrive (SSE events are never buffered); a
failure mid-stream ends the stream with an OpenAI-style error event, and a client that
disconnects cancels the upstream request (closing the connection aborts it in the engine).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
import httpx
import orjson
from starlette.types import Receive, Scope, Send

from gateway.api.errors import upstream_failed
from gateway.api.shapes import StreamTransform

RETRY_STATUSES = {502, 503, 504}
_DROP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "date",
                 "server", "te", "trailer", "upgrade", "proxy-connection"}


class UpstreamFailure(Exception):
    def __init__(self, detail: str, *, retryable: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retryable = retryable


@dataclass(slots=True)
class UpstreamReply:
    response: httpx.Response
    first_chunk: bytes
    rest: AsyncIterator[bytes]

    @property
    def status(self) -> int:
        return self.response.status_code

    def headers(self) -> dict[str, str]:
        return {k: v for k, v in self.response.headers.items() if k.lower() not in _DROP_HEADERS}

    async def read_all(self) -> bytes:
        """The whole body (non-streamed replies); a failure here is still retryable."""
        try:
            parts = [self.first_chunk]
            async for chunk in self.rest:
                parts.append(chunk)
            return b"".join(parts)
        except httpx.HTTPError as exc:
            detail = f"connection lost ({type(exc).__name__})"
            raise UpstreamFailure(detail, retryable=True) from None
        finally:
            await self.response.aclose()


class Upstream:
    """Engine-bound requests straight through an httpx transport.

    The request path skips ``AsyncClient.send`` (cookie jars, auth and redirect handling,
    event hooks: half of the gateway's CPU per request, measured) and talks to the
    transport's connection pool directly; the client still builds requests (timeouts).
    """

    def __init__(self, client: httpx.AsyncClient, transport: httpx.AsyncBaseTransport) -> None:
        self.client = client
        self.transport = transport

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        request = self.client.build_request("POST", url, content=body, headers=headers)
        response = await self.transport.handle_async_request(request)
        response.request = request
        return response


async def open_reply(upstream: Upstream, url: str, body: bytes,
                     headers: dict[str, str]) -> UpstreamReply:
    """POST ``body`` and wait for the status line and the first body chunk."""
    try:
        response = await upstream.post(url, body, headers)
    except httpx.TimeoutException as exc:
        raise UpstreamFailure(f"timed out ({type(exc).__name__})",
                              retryable=isinstance(exc, httpx.ConnectTimeout)) from None
    except httpx.HTTPError as exc:
        raise UpstreamFailure(f"unreachable ({type(exc).__name__})", retryable=True) from None
    if response.status_code in RETRY_STATUSES:
        await response.aclose()
        raise UpstreamFailure(f"status {response.status_code}", retryable=True)
    rest = response.aiter_raw()
    try:
        first = await anext(rest, b"")
    except httpx.TimeoutException:
        await response.aclose()
        raise UpstreamFailure("timed out before the first byte", retryable=False) from None
    except httpx.HTTPError as exc:
        await response.aclose()
        raise UpstreamFailure(f"connection lost ({type(exc).__name__})", retryable=True) from None
    return UpstreamReply(response, first, rest)


class RelayResponse:
    """An ASGI response that relays a committed upstream stream to the client.

    ``on_chunk`` sees every upstream chunk (usage accounting); ``transform`` turns it into
    what the client receives (identity for OpenAI clients); ``on_close(ok, status)`` runs
    exactly once: 200 when the stream completed, 502 when the worker failed mid-stream,
    499 when the client went away.
    """

    def __init__(self, reply: UpstreamReply, headers: dict[str, str],
                 on_chunk: Callable[[bytes], None], on_close: Callable[[bool, int], None],
                 transform: StreamTransform) -> None:
        self.reply = reply
        self.headers = headers
        self.on_chunk = on_chunk
        self.on_close = on_close
        self.transform = transform

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = 499  # until the stream ends one way or the other
        raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                       for k, v in self.headers.items()]
        try:
            await send({"type": "http.response.start", "status": self.reply.status,
                        "headers": raw_headers})
            async with anyio.create_task_group() as group:
                group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
                status = await self._pump(send)
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.reply.response.aclose()
            self.on_close(status == 200, status)

    async def _pump(self, send: Send) -> int:
        try:
            await self._relay(self.reply.first_chunk, send)
            async for chunk in self.reply.rest:
                await self._relay(chunk, send)
        except httpx.HTTPError as exc:
            error = upstream_failed(f"connection lost mid-stream ({type(exc).__name__})")
            await send({"type": "http.response.body", "body": self.transform.error(error),
                        "more_body": False})
            return 502
        await send({"type": "http.response.body", "body": self.transform.finish(),
                    "more_body": False})
        return 200

    async def _relay(self, chunk: bytes, send: Send) -> None:
        if not chunk:
            return
        self.on_chunk(chunk)
        out = self.transform.feed(chunk)
        if out:
            await send({"type": "http.response.body", "body": out, "more_body": True})


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


class UsageSniffer:
    """Finds the ``usage`` object in a relayed body without holding the body back."""

    def __init__(self) -> None:
        self._partial = b""
        self.usage: dict | None = None

    def feed(self, chunk: bytes) -> None:
        if not self._partial and b'"usage"' not in chunk:
            if not chunk.endswith(b"\n"):  # keep only an unfinished last line
                self._partial = chunk[chunk.rfind(b"\n") + 1:]
            return
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > 1 << 20:  # a pathological line: stop tracking it
            self._partial = b""
        for line in lines:
            if line.startswith(b"data: {") and b'"usage"' in line:
                self._take(line[6:])

    def feed_json(self, body: bytes) -> None:
        self._take(body)

    def _take(self, payload: bytes) -> None:
        try:
            usage = orjson.loads(payload).get("usage")
        except (orjson.JSONDecodeError, AttributeError):
            return
        if isinstance(usage, dict):
            self.usage = usage

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        value = details.get("cached_tokens")
        return value if isinstance(value, int) else None
