"""Anthropic Messages replies: an engine's OpenAI chat answer (JSON or SSE stream) turned
into an Anthropic Message or Anthropic's event stream, usage included.

Usage: ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` is the
whole prompt, as Anthropic defines it. ``cache_read`` is what the engine served from its
prefix cache; ``cache_creation`` is the part of the prompt covered by the client's last
``cache_control`` breakpoint that was not read from cache (it is being written now).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from gateway.api.anthropic import AnthropicError, error_type_for, sse_event

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "function_call": "tool_use", "content_filter": "refusal"}


def anthropic_usage(usage: dict[str, Any] | None, breakpoint_tokens: int = 0) -> dict[str, int]:
    """OpenAI usage -> Anthropic usage, keeping Anthropic's invariant that
    ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` is the prompt.

    * ``cache_read_input_tokens`` = ``prompt_tokens_details.cached_tokens`` (0 if absent):
      the prompt tokens the engine's prefix cache served.
    * ``cache_creation_input_tokens`` = ``max(0, breakpoint_tokens - cached)``: the part of
      the prefix the client marked for caching (``breakpoint_tokens``: the prompt length the
      last cache_control breakpoint closes, 0 if none) that was computed, hence now cached.
    * ``input_tokens`` = the rest: ``prompt_tokens - cached - created``.
    * ``output_tokens`` = ``completion_tokens``.
    """
    usage = usage or {}
    prompt = usage.get("prompt_tokens") or 0
    cached = min(prompt, (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    created = max(0, min(breakpoint_tokens, prompt) - cached)
    return {"input_tokens": prompt - cached - created, "cache_creation_input_tokens": created,
            "cache_read_input_tokens": cached,
            "output_tokens": usage.get("completion_tokens") or 0}


def _matched_stop(choice: dict[str, Any]) -> str | None:
    """The stop string that ended generation: vLLM's ``stop_reason``, SGLang's
    ``matched_stop`` (both are token ids, not strings, for EOS / stop tokens)."""
    for key in ("stop_reason", "matched_stop"):
        if isinstance(choice.get(key), str):
            return choice[key]
    return None


def _stop_reason(finish: str | None, matched: str | None, tool_use: bool
                 ) -> tuple[str, str | None]:
    if finish == "length":
        return "max_tokens", None
    if tool_use:
        return "tool_use", None
    if finish == "stop" and matched is not None:
        return "stop_sequence", matched
    return _STOP_REASONS.get(finish or "stop", "end_turn"), None


def _message_id(openai_id: Any) -> str:
    if isinstance(openai_id, str) and openai_id:
        return "msg_" + openai_id.removeprefix("chatcmpl-")
    return "msg_" + uuid.uuid4().hex


def _tool_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments) if arguments else {}
        except orjson.JSONDecodeError:
            arguments = {}
    return arguments if isinstance(arguments, dict) else {}


def from_openai_response(openai_body: dict[str, Any], model: str, *,
                         breakpoint_tokens: int = 0) -> dict[str, Any]:
    """A chat completion -> an Anthropic Message (first choice; ``model`` as the client
    named it); see :func:`anthropic_usage` for ``breakpoint_tokens``."""
    choice = (openai_body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                        "name": function.get("name") or "",
                        "input": _tool_input(function.get("arguments"))})
    tool_use = any(block["type"] == "tool_use" for block in content)
    stop_reason, stop_sequence = _stop_reason(choice.get("finish_reason"), _matched_stop(choice),
                                              tool_use)
    return {"id": _message_id(openai_body.get("id")), "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": anthropic_usage(openai_body.get("usage"), breakpoint_tokens)}


def _sse_data(event: bytes) -> bytes | None:
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n")
             if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _upstream_error(error: Any) -> AnthropicError:
    error = error if isinstance(error, dict) else {"message": str(error)}
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return AnthropicError(status, error_type_for(status),
                          str(error.get("message") or "The inference worker failed."))


class StreamTranslator:
    """The engine's OpenAI chat SSE stream -> Anthropic's Messages event stream.

    ``feed`` raw bytes as they arrive (events may be split anywhere) and send what it
    returns; call ``finish`` at the end of the upstream stream. The stream must have been
    requested with ``stream_options.include_usage`` so the last chunk carries usage, which
    goes, complete, into ``message_delta``; ``message_start`` reports zeros.
    """

    def __init__(self, model: str, breakpoint_tokens: int = 0) -> None:
        self.model = model
        self.breakpoint_tokens = breakpoint_tokens
        self._buffer = b""
        self._started = self._done = False
        self._blocks = 0  # content blocks started; the open one, if any, is the last
        self._open: str | int | None = None  # "text" or the OpenAI tool-call index
        self._tools: dict[int, int] = {}  # OpenAI tool-call index -> content block index
        self._finish: str | None = None
        self._matched: str | None = None
        self._usage: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        self._buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
        while not self._done and (end := self._buffer.find(b"\n\n")) >= 0:
            event, self._buffer = self._buffer[:end], self._buffer[end + 2:]
            data = _sse_data(event)
            if data is not None:
                out += self._on_data(data)
        return out

    def finish(self) -> list[bytes]:
        out = self.feed(b"\n\n") if self._buffer.strip() else []
        if self._done:
            return out
        if self._finish is None:
            return out + self._fail(AnthropicError(
                502, "api_error", "The inference worker's stream ended before the response "
                "was complete."))
        return out + self._finalize()

    def _on_data(self, data: bytes) -> list[bytes]:
        if data.strip() == b"[DONE]":
            return self._finalize()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            chunk = None
        if not isinstance(chunk, dict):
            return self._fail(AnthropicError(502, "api_error", "The inference worker sent a "
                                             "malformed stream event."))
        if "error" in chunk:
            return self._fail(_upstream_error(chunk["error"]))
        out = self._start(chunk.get("id"))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                out += self._on_choice(choice)
        return out

    def _on_choice(self, choice: dict[str, Any]) -> list[bytes]:
        delta = choice.get("delta") or {}
        out: list[bytes] = []
        if delta.get("content"):
            if self._open != "text":
                out += self._open_block("text", {"type": "text", "text": ""})
            out.append(sse_event("content_block_delta", index=self._blocks - 1,
                              delta={"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or []:
            out += self._on_tool_call(call)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
            self._matched = _matched_stop(choice)
        return out

    def _on_tool_call(self, call: dict[str, Any]) -> list[bytes]:
        index = call.get("index", 0)
        function = call.get("function") or {}
        out: list[bytes] = []
        if index not in self._tools:
            out += self._open_block(index, {
                "type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                "name": function.get("name") or "", "input": {}})
            self._tools[index] = self._blocks - 1
        if function.get("arguments"):
            out.append(sse_event("content_block_delta", index=self._tools[index], delta={
                "type": "input_json_delta", "partial_json": function["arguments"]}))
        return out

    def _start(self, openai_id: Any) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message = {"id": _message_id(openai_id), "type": "message", "role": "assistant",
                   "model": self.model, "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": anthropic_usage(None)}
        return [sse_event("message_start", message=message)]

    def _open_block(self, key: str | int, block: dict[str, Any]) -> list[bytes]:
        out = self._close_block()
        self._open = key
        self._blocks += 1
        return [*out, sse_event("content_block_start", index=self._blocks - 1,
                             content_block=block)]

    def _close_block(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [sse_event("content_block_stop", index=self._blocks - 1)]

    def _finalize(self) -> list[bytes]:
        out = self._start(None) + self._close_block()
        self._done = True
        stop_reason, stop_sequence = _stop_reason(self._finish, self._matched, bool(self._tools))
        usage = anthropic_usage(self._usage, self.breakpoint_tokens)
        return [*out, sse_event("message_delta", usage=usage, delta={
            "stop_reason": stop_reason, "stop_sequence": stop_sequence}),
            sse_event("message_stop")]

    def _fail(self, error: AnthropicError) -> list[bytes]:
        self._done = True
        return [error.sse()]
