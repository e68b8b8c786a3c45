"""OpenAI chat / completions requests: parse, validate, and keep what routing needs.

The body is forwarded to the engine as the client sent it (engines accept extensions the
gateway need not know), so validation checks the fields the gateway reads or that would
otherwise fail deep inside an engine, and leaves the rest alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from gateway.api.errors import ApiError, bad_request
from gateway.chat_template import ChatInputError, normalize_messages

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
_NUMBER = (int, float)


@dataclass(slots=True)
class ParsedRequest:
    kind: Literal["chat", "completion"]
    body: dict[str, Any]
    model: str
    stream: bool
    max_tokens: int | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Chat: the conversation normalised as the engine renders it."""
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    prompt: str | list[int] | None = None
    """Completion: the (first) prompt, text or token ids."""


def decode_json(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise bad_request("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body


def _check(body: dict, name: str, types: type | tuple[type, ...], *, required: bool = False,
           what: str = "") -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request(f"Missing required parameter: '{name}'.", name,
                              "missing_required_parameter")
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise bad_request(f"Invalid type for '{name}': expected {what}, got a boolean.", name,
                          "invalid_type")
    if not isinstance(value, types):
        raise bad_request(f"Invalid type for '{name}': expected {what}.", name, "invalid_type")
    return value


def _check_range(body: dict, name: str, lo: float, hi: float) -> None:
    value = _check(body, name, _NUMBER, what="a number")
    if value is not None and not lo <= value <= hi:
        raise bad_request(f"'{name}' must be between {lo} and {hi}; got {value}.", name,
                          "invalid_value")


def _common(body: dict) -> tuple[str, bool, int | None]:
    model = _check(body, "model", str, required=True, what="a string")
    stream = _check(body, "stream", bool, what="a boolean") or False
    options = _check(body, "stream_options", dict, what="an object")
    if options is not None:
        if not stream:
            raise bad_request("'stream_options' is only allowed when 'stream' is true.",
                              "stream_options")
        _check(options, "include_usage", bool, what="a boolean")
    max_tokens = None
    for name in ("max_completion_tokens", "max_tokens"):
        value = _check(body, name, int, what="an integer")
        if value is not None:
            if value < 1:
                raise bad_request(f"'{name}' must be at least 1; got {value}.", name,
                                  "invalid_value")
            max_tokens = value if max_tokens is None else min(max_tokens, value)
    n = _check(body, "n", int, what="an integer")
    if n is not None and n < 1:
        raise bad_request("'n' must be at least 1.", "n", "invalid_value")
    _check_range(body, "temperature", 0.0, 2.0)
    _check_range(body, "top_p", 0.0, 1.0)
    _check_range(body, "presence_penalty", -2.0, 2.0)
    _check_range(body, "frequency_penalty", -2.0, 2.0)
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or (
            isinstance(stop, list) and all(isinstance(s, str) for s in stop))):
        raise bad_request("'stop' must be a string or a list of strings.", "stop", "invalid_type")
    return model, stream, max_tokens


def parse_chat(body: dict[str, Any]) -> ParsedRequest:
    model, stream, max_tokens = _common(body)
    messages = _check(body, "messages", list, required=True, what="an array of messages")
    if not messages:
        raise bad_request("'messages' must contain at least one message.", "messages",
                          "empty_array")
    for i, message in enumerate(messages):
        _check_message(message, i)
    tools = _check(body, "tools", list, what="an array of tools")
    for i, tool in enumerate(tools or []):
        if not (isinstance(tool, dict) and isinstance(tool.get("function"), dict)
                and isinstance(tool["function"].get("name"), str)):
            raise bad_request(f"tools[{i}] must be {{'type': 'function', 'function': "
                              "{'name': ...}}.", f"tools[{i}]", "invalid_type")
    kwargs = dict(_check(body, "chat_template_kwargs", dict, what="an object") or {})
    for name in ("add_generation_prompt", "continue_final_message"):
        if _check(body, name, bool, what="a boolean") is not None:
            kwargs[name] = body[name]
    kwargs.setdefault("add_generation_prompt", not kwargs.get("continue_final_message", False))
    if tools and body.get("tool_choice") != "none":
        kwargs["tools"] = tools
    try:
        normalized = normalize_messages(messages)
    except ChatInputError as exc:
        raise bad_request(str(exc), exc.param) from None
    return ParsedRequest("chat", body, model, stream, max_tokens, messages=normalized,
                         template_kwargs=kwargs)


def _check_message(message: Any, i: int) -> None:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise bad_request(f"{where} must be an object.", where, "invalid_type")
    role = message.get("role")
    if not isinstance(role, str):
        raise bad_request(f"Missing required parameter: '{where}.role'.", f"{where}.role",
                          "missing_required_parameter")
    if role not in ROLES:
        raise bad_request(f"Invalid value for '{where}.role': {role!r}.", f"{where}.role",
                          "invalid_value")
    content = message.get("content")
    if content is None and role in ("system", "developer", "user", "tool"):
        raise bad_request(f"Missing required parameter: '{where}.content'.",
                          f"{where}.content", "missing_required_parameter")
    if content is not None and not isinstance(content, str | list):
        raise bad_request(f"Invalid type for '{where}.content': expected a string or an "
                          "array of content parts.", f"{where}.content", "invalid_type")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise bad_request(f"Invalid type for '{where}.tool_calls': expected an array.",
                          f"{where}.tool_calls", "invalid_type")


def parse_completion(body: dict[str, Any]) -> ParsedRequest:
    model, stream, max_tokens = _common(body)
    prompt = body.get("prompt")
    if prompt is None:
        raise bad_request("Missing required parameter: 'prompt'.", "prompt",
                          "missing_required_parameter")
    first = _first_prompt(prompt)
    return ParsedRequest("completion", body, model, stream, max_tokens, prompt=first)


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 32 for t in value)


def _first_prompt(prompt: Any) -> str | list[int]:
    """A prompt is text, token ids, or a batch of either; routing follows the first."""
    if isinstance(prompt, str):
        return prompt
    if _is_token_list(prompt):
        return prompt
    if isinstance(prompt, list) and prompt and (
            all(isinstance(p, str) for p in prompt) or all(_is_token_list(p) for p in prompt)):
        return prompt[0]
    raise bad_request("'prompt' must be a string, an array of token ids, or an array of "
                      "either.", "prompt", "invalid_type")


def check_context(prompt_tokens: int, max_tokens: int | None, max_model_len: int,
                  param: str) -> None:
    """Reject prompts the engine could not take, before a worker is spent on them."""
    if prompt_tokens >= max_model_len or (
            max_tokens is not None and prompt_tokens + max_tokens > max_model_len):
        asked = f" and {max_tokens} completion tokens" if max_tokens else ""
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. "
                       f"However, you requested {prompt_tokens} prompt tokens{asked}. Please "
                       "reduce the length of the prompt or of max_tokens.", param=param,
                       code="context_length_exceeded")
