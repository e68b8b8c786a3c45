"""How an engine's OpenAI reply reaches the client: as it is, or as an Anthropic Message.

A shape renders a complete reply (status + body), transforms a stream chunk by chunk, and
renders gateway errors, each in its API's own format.
"""

from __future__ import annotations

from typing import Protocol

import orjson
from starlette.responses import Response

from gateway.api import anthropic, anthropic_reply
from gateway.api.errors import ApiError, error_response, sse_error_event


class StreamTransform(Protocol):
    def feed(self, chunk: bytes) -> bytes: ...
    def finish(self) -> bytes: ...
    def error(self, error: ApiError) -> bytes: ...


class ReplyShape(Protocol):
    content_type: str

    def complete(self, status: int, body: bytes, headers: dict[str, str]) -> Response: ...
    def stream(self) -> StreamTransform: ...
    def error(self, error: ApiError) -> Response: ...
    def note_breakpoint(self, tokens: int) -> None:
        """The prompt tokens a client's last cache breakpoint covers."""


class _Passthrough:
    def feed(self, chunk: bytes) -> bytes:
        return chunk

    def finish(self) -> bytes:
        return b""

    def error(self, error: ApiError) -> bytes:
        return sse_error_event(error)


class OpenAIShape:
    """The engine already speaks OpenAI: bytes pass through untouched."""

    content_type = "text/event-stream; charset=utf-8"

    def complete(self, status: int, body: bytes, headers: dict[str, str]) -> Response:
        return Response(body, status_code=status, headers=headers)

    def stream(self) -> StreamTransform:
        return _Passthrough()

    def error(self, error: ApiError) -> Response:
        return error_response(error)

    def note_breakpoint(self, tokens: int) -> None:
        pass


class _AnthropicStream:
    def __init__(self, translator: anthropic_reply.StreamTranslator) -> None:
        self.translator = translator

    def feed(self, chunk: bytes) -> bytes:
        return b"".join(self.translator.feed(chunk))

    def finish(self) -> bytes:
        return b"".join(self.translator.finish())

    def error(self, error: ApiError) -> bytes:
        return anthropic.from_api_error(error).sse()


class AnthropicShape:
    """Messages API: the engine's chat reply translated; ``breakpoint_tokens`` (the prompt
    covered by the last ``cache_control`` breakpoint) shapes the cache usage fields."""

    content_type = "text/event-stream; charset=utf-8"

    def __init__(self, model: str) -> None:
        self.model = model
        self.breakpoint_tokens = 0

    def complete(self, status: int, body: bytes, headers: dict[str, str]) -> Response:
        keep = {k: v for k, v in headers.items() if k.startswith("x-")}
        if status != 200:
            return self.error(_engine_error(status, body)) if status >= 400 else Response(
                body, status_code=status, headers=keep)
        try:
            message = anthropic_reply.from_openai_response(orjson.loads(body), self.model,
                                                     breakpoint_tokens=self.breakpoint_tokens)
        except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
            return self.error(ApiError(502, "The inference worker sent an unreadable reply.",
                                       type="server_error", code="upstream_error"))
        return Response(orjson.dumps(message), media_type="application/json", headers=keep)

    def stream(self) -> StreamTransform:
        translator = anthropic_reply.StreamTranslator(self.model, self.breakpoint_tokens)
        return _AnthropicStream(translator)

    def note_breakpoint(self, tokens: int) -> None:
        self.breakpoint_tokens = tokens

    def error(self, error: ApiError) -> Response:
        return anthropic.error_response(anthropic.from_api_error(error))


def _engine_error(status: int, body: bytes) -> ApiError:
    """An engine's OpenAI-shaped error, re-read so it can be rendered in another shape."""
    message = "The inference worker rejected the request."
    try:
        error = orjson.loads(body).get("error") or {}
        message = str(error.get("message") or message)
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return ApiError(status, message, type="invalid_request_error" if status < 500 else
                    "server_error")
