"""Anthropic Messages API (``POST /v1/messages``) served through an engine's OpenAI chat API.

Pure translation, no I/O: validate a Messages request, build the engine's OpenAI chat body,
turn its answer (JSON or an SSE stream) back into an Anthropic Message or event stream.

* Text blocks are joined with ``"\\n"``, empty ones dropped, as vLLM joins text parts.
* A user message's ``tool_result`` blocks become ``role: "tool"`` messages placed before one
  user message with the rest of its text; ``is_error`` has no OpenAI field and is dropped.
* A final assistant message without tool calls is a prefill: the engine continues it.
* ``cache_control`` breakpoints are recorded, not acted on (engine prefix caching is
  automatic); they shape the ``cache_creation_input_tokens`` reported to the client.
* Unknown top-level fields (``thinking``...) are ignored; engine reasoning is not surfaced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import orjson
from starlette.responses import Response

from gateway.api.errors import ApiError

TTL_SECONDS = {"5m": 300, "1h": 3600}
MAX_BREAKPOINTS = 4
# 502 (the worker failed) is Anthropic's generic api_error; 503 (no healthy worker, retry
# shortly) is what Anthropic reports as overloaded_error; other 4xx/5xx fall back by class.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 502: "api_error",
               503: "overloaded_error", 504: "timeout_error"}
_NUMBER = (int, float)


class AnthropicError(Exception):
    """An error in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``."""

    def __init__(self, status: int, type: str, message: str, *,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.type, "message": self.message}}

    def sse(self) -> bytes:
        """The error as an ``event: error`` inside an already started stream."""
        return sse_event("error", error=self.body()["error"])


def sse_event(name: str, **data: Any) -> bytes:
    """``event: <name>`` whose data is ``{"type": <name>, **data}``, as Anthropic frames."""
    data = {"type": name, **data}
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def invalid(message: str) -> AnthropicError:
    return AnthropicError(400, "invalid_request_error", message)


def error_type_for(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def from_api_error(error: ApiError) -> AnthropicError:
    """The gateway's OpenAI-shaped error, same status and headers (``retry-after``)."""
    return AnthropicError(error.status, error_type_for(error.status), error.message,
                          headers=error.headers)


def error_response(error: AnthropicError) -> Response:
    return Response(orjson.dumps(error.body()), status_code=error.status,
                    media_type="application/json", headers=error.headers)


# --- requests -------------------------------------------------------------------------------

@dataclass(slots=True, frozen=True)
class CacheBreakpoint:
    messages: int
    """How many leading OpenAI chat messages (system first) the cached prefix spans; a
    breakpoint inside a message closes that whole message, one on a tool closes 0."""
    tools: bool
    """Whether the prefix holds the tool definitions: always, when the request has tools,
    since Anthropic orders the prefix tools -> system -> messages."""
    ttl_s: int


@dataclass(slots=True)
class AnthropicRequest:
    model: str
    max_tokens: int
    messages: list[dict[str, Any]]
    """The conversation already as OpenAI chat messages, system first."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI function tools."""
    stream: bool = False
    stop_sequences: list[str] = field(default_factory=list)
    user_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """Further OpenAI body fields: sampling, tool_choice, parallel_tool_calls, prefill."""
    breakpoints: list[CacheBreakpoint] = field(default_factory=list)
    """Ordered by prefix length; the last closes the longest cached prefix."""


class _Chat:
    """OpenAI chat messages being built, and the cache_control marks met on the way."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.marks: list[tuple[int, int]] = []  # (leading messages, ttl seconds)

    def mark(self, block: dict[str, Any], where: str) -> None:
        ttl = _cache_ttl(block, where)
        if ttl is not None:
            self.marks.append((len(self.messages), ttl))


def _get(obj: dict, name: str, types: type | tuple[type, ...], what: str, *, where: str = "",
         required: bool = False) -> Any:
    path = f"{where}.{name}" if where else name
    value = obj.get(name)
    if value is None:
        if required:
            raise invalid(f"{path}: Field required")
        return None
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in allowed):
        raise invalid(f"{path}: Input should be {what}")
    return value


def _cache_ttl(block: dict[str, Any], where: str) -> int | None:
    control = block.get("cache_control")
    if control is None:
        return None
    where = f"{where}.cache_control" if where else "cache_control"
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise invalid(f"{where}.type: Input should be 'ephemeral'")
    ttl = control.get("ttl") or "5m"
    if ttl not in TTL_SECONDS:
        raise invalid(f"{where}.ttl: Input should be '5m' or '1h'")
    return TTL_SECONDS[ttl]


def parse_messages_request(body: dict[str, Any]) -> AnthropicRequest:
    model = _get(body, "model", str, "a valid string", required=True)
    max_tokens = _get(body, "max_tokens", int, "a valid integer", required=True)
    if max_tokens < 1:
        raise invalid("max_tokens: Input should be greater than or equal to 1")
    messages = _get(body, "messages", list, "a valid list", required=True)
    if not messages:
        raise invalid("messages: at least one message is required")
    chat = _Chat()
    tools = _parse_tools(_get(body, "tools", list, "a valid list") or [], chat)
    _add_system(body.get("system"), chat)
    for i, message in enumerate(messages):
        _add_message(message, f"messages.{i}", chat)
    ttl = _cache_ttl(body, "")  # top level: a breakpoint on the last block, if none is there
    if ttl is not None and all(n < len(chat.messages) for n, _ in chat.marks):
        chat.marks.append((len(chat.messages), ttl))
    stops = _get(body, "stop_sequences", list, "a valid list") or []
    if not all(isinstance(s, str) for s in stops):
        raise invalid("stop_sequences: Input should be a list of strings")
    metadata = _get(body, "metadata", dict, "a valid dictionary") or {}
    return AnthropicRequest(
        model, max_tokens, chat.messages, tools,
        stream=_get(body, "stream", bool, "a valid boolean") or False, stop_sequences=stops,
        user_id=_get(metadata, "user_id", str, "a valid string", where="metadata"),
        options={**_sampling(body), **_tool_choice(body.get("tool_choice"), tools),
                 **_prefill(chat.messages[-1])},
        breakpoints=_breakpoints(chat.marks, bool(tools)))


def _prefill(last: dict[str, Any]) -> dict[str, bool]:
    """A final assistant turn is continued, not answered (vLLM/SGLang extension fields)."""
    if last["role"] == "assistant" and "tool_calls" not in last:
        return {"add_generation_prompt": False, "continue_final_message": True}
    return {}


def _parse_tools(tools: list[Any], chat: _Chat) -> list[dict[str, Any]]:
    out, names = [], set()
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise invalid(f"{where}: Input should be a valid dictionary")
        if tool.get("type", "custom") not in ("custom", None):
            raise invalid(f"{where}.type: server tools ({tool['type']!r}) are not supported")
        name = _get(tool, "name", str, "a valid string", where=where, required=True)
        if name in names:
            raise invalid(f"tools: Tool names must be unique ({name!r})")
        names.add(name)
        function: dict[str, Any] = {"name": name}
        description = _get(tool, "description", str, "a valid string", where=where)
        if description is not None:
            function["description"] = description
        function["parameters"] = _get(tool, "input_schema", dict, "a valid dictionary",
                                      where=where, required=True)
        out.append({"type": "function", "function": function})
        chat.mark(tool, where)
    return out


def _add_system(system: Any, chat: _Chat) -> None:
    if system is None:
        return
    if isinstance(system, str):
        blocks: list[Any] = [{"type": "text", "text": system}]
    elif isinstance(system, list):
        blocks = system
    else:
        raise invalid("system: Input should be a valid string or a list of text blocks")
    text = _join([_text(block, f"system.{i}") for i, block in enumerate(blocks)])
    if text:
        chat.messages.append({"role": "system", "content": text})
    for i, block in enumerate(blocks):
        chat.mark(block, f"system.{i}")


def _text(block: Any, where: str) -> str:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind in ("image", "document"):
        raise invalid(f"{where}: {kind} content blocks are not supported (this model takes "
                      "text only)")
    if kind != "text":
        raise invalid(f"{where}.type: unsupported content block type {kind!r}; expected "
                      "'text', 'tool_use' or 'tool_result'")
    return _get(block, "text", str, "a valid string", where=where, required=True)


def _join(texts: list[str]) -> str:
    return "\n".join(t for t in texts if t)


def _add_message(message: Any, where: str, chat: _Chat) -> None:
    if not isinstance(message, dict):
        raise invalid(f"{where}: Input should be a valid dictionary")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise invalid(f"{where}.role: Input should be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    elif not (isinstance(content, list) and content):
        raise invalid(f"{where}.content: Input should be a string or a non-empty list of "
                      "content blocks")
    blocks = [(b, f"{where}.content.{j}") for j, b in enumerate(content)]
    for block, at in blocks:
        if not isinstance(block, dict):
            raise invalid(f"{at}: Input should be a valid dictionary")
    (_add_user if role == "user" else _add_assistant)(blocks, chat)


def _add_user(blocks: list[tuple[dict[str, Any], str]], chat: _Chat) -> None:
    texts, text_blocks = [], []
    for block, where in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            message, marked = _tool_message(block, where)
            chat.messages.append(message)
            for part, at in marked:
                chat.mark(part, at)
        elif kind == "tool_use":
            raise invalid(f"{where}: tool_use blocks belong in assistant messages")
        else:
            texts.append(_text(block, where))
            text_blocks.append((block, where))
    if text_blocks:
        chat.messages.append({"role": "user", "content": _join(texts)})
    for block, where in text_blocks:
        chat.mark(block, where)


def _tool_message(block: dict[str, Any], where: str
                  ) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """The tool message, and the blocks (its content's, then itself) that may close a
    cache prefix at it."""
    call_id = _get(block, "tool_use_id", str, "a valid string", where=where, required=True)
    content = block.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    elif content is None:
        content = []
    elif not isinstance(content, list):
        raise invalid(f"{where}.content: Input should be a string or a list of blocks")
    parts = [(part, f"{where}.content.{k}") for k, part in enumerate(content)]
    text = _join([_text(part, at) for part, at in parts])
    return ({"role": "tool", "tool_call_id": call_id, "content": text},
            [*parts, (block, where)])


def _add_assistant(blocks: list[tuple[dict[str, Any], str]], chat: _Chat) -> None:
    texts, calls = [], []
    for block, where in blocks:
        kind = block.get("type")
        if kind == "tool_use":
            calls.append(_tool_call(block, where))
        elif kind == "tool_result":
            raise invalid(f"{where}: tool_result blocks belong in user messages")
        else:
            texts.append(_text(block, where))
    text = _join(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls
                               else None}
    if calls:
        message["tool_calls"] = calls
    chat.messages.append(message)
    for block, where in blocks:
        chat.mark(block, where)


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = _get(block, "id", str, "a valid string", where=where, required=True)
    name = _get(block, "name", str, "a valid string", where=where, required=True)
    arguments = _get(block, "input", dict, "a valid dictionary", where=where, required=True)
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI ``tool_choice`` and ``parallel_tool_calls``; none without tools (engines
    reject a tool_choice without tools)."""
    if choice is None:
        return {}
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    kind = choice["type"]
    disable = _get(choice, "disable_parallel_tool_use", bool, "a valid boolean",
                   where="tool_choice")
    if kind in ("any", "tool") and not tools:
        raise invalid(f"tool_choice: type {kind!r} requires 'tools'")
    if not tools:
        return {}
    out: dict[str, Any] = {"tool_choice": {"any": "required"}.get(kind, kind)}
    if kind == "tool":
        name = _get(choice, "name", str, "a valid string", where="tool_choice", required=True)
        if name not in {t["function"]["name"] for t in tools}:
            raise invalid(f"tool_choice.name: no tool named {name!r} in 'tools'")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    if disable is not None and kind != "none":
        out["parallel_tool_calls"] = not disable
    return out


def _sampling(body: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in ("temperature", "top_p"):
        value = _get(body, name, _NUMBER, "a valid number")
        if value is not None:
            if not 0 <= value <= 1:
                raise invalid(f"{name}: Input should be between 0 and 1")
            out[name] = value
    top_k = _get(body, "top_k", int, "a valid integer")
    if top_k is not None:
        if top_k < 0:
            raise invalid("top_k: Input should be greater than or equal to 0")
        out["top_k"] = top_k
    return out


def _breakpoints(marks: list[tuple[int, int]], tools: bool) -> list[CacheBreakpoint]:
    if len(marks) > MAX_BREAKPOINTS:
        raise invalid(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be "
                      f"provided. Found {len(marks)}.")
    if any(a < b for (_, a), (_, b) in pairwise(marks)):
        raise invalid("A cache_control block with ttl='1h' must not come after one with "
                      "ttl='5m'.")
    return sorted((CacheBreakpoint(n, tools, ttl) for n, ttl in marks),
                  key=lambda b: b.messages)


def to_openai_chat(req: AnthropicRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"model": req.model, "messages": list(req.messages),
                            "max_tokens": req.max_tokens}
    if req.tools:
        body["tools"] = list(req.tools)
    if req.stop_sequences:
        body["stop"] = list(req.stop_sequences)
    if req.user_id:
        body["user"] = req.user_id
    body.update(req.options)
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# --- responses ------------------------------------------------------------------------------
