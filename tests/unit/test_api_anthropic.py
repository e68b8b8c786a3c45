"""Anthropic Messages <-> OpenAI chat translation, checked against the official SDK."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from gateway.api.anthropic import (
    AnthropicError,
    CacheBreakpoint,
    error_response,
    from_api_error,
    parse_messages_request,
    to_openai_chat,
)
from gateway.api.anthropic_reply import StreamTranslator, anthropic_usage, from_openai_response
from gateway.api.errors import ApiError, no_healthy_worker, not_found_model, upstream_failed
from gateway.api.openai import parse_chat

BASE: dict[str, Any] = {"model": "m", "max_tokens": 16,
                        "messages": [{"role": "user", "content": "hi"}]}
EPHEMERAL = {"type": "ephemeral"}
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def body_with(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def text(value: str, cache: dict | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if cache is not None:
        block["cache_control"] = cache
    return block


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def sdk_client(handler: Callable[[httpx2.Request], httpx2.Response]) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url="http://gateway", max_retries=0,
                               http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


# --- validation -----------------------------------------------------------------------------

INVALID = [
    ("missing-max_tokens", body_with(max_tokens=None), "max_tokens: Field required"),
    ("zero-max_tokens", body_with(max_tokens=0), "max_tokens"),
    ("bool-max_tokens", body_with(max_tokens=True), "max_tokens: Input should be"),
    ("missing-model", body_with(model=None), "model: Field required"),
    ("empty-messages", body_with(messages=[]), "messages"),
    ("bad-role", body_with(messages=[{"role": "system", "content": "x"}]),
     "messages.0.role"),
    ("image-block", body_with(messages=[user(text("look"), {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AA=="}})]),
     "messages.0.content.1: image content blocks are not supported"),
    ("unknown-block", body_with(messages=[user({"type": "thinking", "thinking": "."})]),
     "unsupported content block type 'thinking'"),
    ("cache-type", body_with(messages=[user(text("x", {"type": "persistent"}))]),
     "messages.0.content.0.cache_control.type"),
    ("top-level-cache-type", body_with(cache_control={"type": "forever"}),
     "cache_control.type"),
    ("cache-ttl-2h", body_with(messages=[user(text("x", {"type": "ephemeral", "ttl": "2h"}))]),
     "cache_control.ttl"),
    ("five-breakpoints", body_with(messages=[user(*[text(str(i), EPHEMERAL) for i in range(5)])]),
     "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    ("1h-after-5m", body_with(messages=[user(text("a", EPHEMERAL),
                                             text("b", {"type": "ephemeral", "ttl": "1h"}))]),
     "ttl='1h' must not come after"),
    ("temperature", body_with(temperature=1.5), "temperature: Input should be between 0 and 1"),
    ("top_k", body_with(top_k=-1), "top_k"),
    ("tool_use-from-user", body_with(messages=[user(
        {"type": "tool_use", "id": "t", "name": "f", "input": {}})]), "assistant messages"),
    ("tool_result-from-assistant", body_with(messages=[{"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]), "user messages"),
    ("tool_use-without-input", body_with(messages=[{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f"}]}]), "content.0.input: Field required"),
    ("unknown-tool-choice", body_with(tools=[WEATHER], tool_choice={"type": "tool",
                                                                    "name": "nope"}), "nope"),
    ("any-without-tools", body_with(tool_choice={"type": "any"}), "requires 'tools'"),
    ("server-tool", body_with(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
     "server tools"),
    ("duplicate-tools", body_with(tools=[WEATHER, WEATHER]), "unique"),
    ("tool-without-schema", body_with(tools=[{"name": "f"}]), "tools.0.input_schema"),
    ("system-number", body_with(system=3), "system"),
    ("stop-sequences", body_with(stop_sequences=["a", 1]), "stop_sequences"),
    ("stream-string", body_with(stream="yes"), "stream"),
]


@pytest.mark.parametrize(("body", "fragment"), [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid_requests_get_anthropic_400s(body: dict, fragment: str) -> None:
    with pytest.raises(AnthropicError) as caught:
        parse_messages_request(body)
    error = caught.value
    assert error.status == 400
    assert error.body() == {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": error.message}}
    assert fragment in error.message


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (ApiError(400, "bad"), 400, "invalid_request_error"),
        (ApiError(401, "who"), 401, "authentication_error"),
        (ApiError(403, "no"), 403, "permission_error"),
        (not_found_model("x", ["m"]), 404, "not_found_error"),
        (ApiError(413, "big"), 413, "request_too_large"),
        (ApiError(422, "odd"), 422, "invalid_request_error"),
        (ApiError(429, "slow down"), 429, "rate_limit_error"),
        (ApiError(500, "oops"), 500, "api_error"),
        (upstream_failed("boom"), 502, "api_error"),
        (no_healthy_worker(), 503, "overloaded_error"),
        (ApiError(504, "slow"), 504, "timeout_error"),
    ],
)
def test_api_errors_map_to_anthropic_types(error: ApiError, status: int, kind: str) -> None:
    converted = from_api_error(error)
    assert (converted.status, converted.type, converted.message) == (status, kind,
                                                                      error.message)
    assert converted.headers == error.headers
    response = error_response(converted)
    assert response.status_code == status
    assert orjson.loads(response.body)["error"]["type"] == kind


def test_retry_after_survives_conversion() -> None:
    assert from_api_error(no_healthy_worker(3)).headers == {"retry-after": "3"}


# --- request translation --------------------------------------------------------------------

CONVERSATION: dict[str, Any] = {
    "model": "qwen",
    "max_tokens": 256,
    "system": [text("You are terse."), text("Use tools.", {"type": "ephemeral", "ttl": "1h"})],
    "tools": [WEATHER],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            text("Checking."),
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        user({"type": "tool_result", "tool_use_id": "toolu_1", "content": [text("18C, sunny")]},
             text("And tomorrow?", EPHEMERAL)),
    ],
    "stop_sequences": ["\n\nHuman:"],
    "temperature": 0.2,
    "top_p": 0.9,
    "top_k": 40,
    "stream": True,
    "metadata": {"user_id": "u-1"},
}

EXPECTED_CHAT: dict[str, Any] = {
    "model": "qwen",
    "messages": [
        {"role": "system", "content": "You are terse.\nUse tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C, sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ],
    "max_tokens": 256,
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": WEATHER["input_schema"]}}],
    "stop": ["\n\nHuman:"],
    "user": "u-1",
    "temperature": 0.2,
    "top_p": 0.9,
    "top_k": 40,
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "stream": True,
    "stream_options": {"include_usage": True},
}

ANTHROPIC_ONLY = {"system", "stop_sequences", "metadata", "cache_control", "input_schema",
                  "tool_use_id", "disable_parallel_tool_use", "input"}


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


def test_conversation_translates_to_openai_chat() -> None:
    request = parse_messages_request(copy.deepcopy(CONVERSATION))
    chat = to_openai_chat(request)
    assert chat == EXPECTED_CHAT
    assert not _keys(chat) & ANTHROPIC_ONLY
    assert request.breakpoints == [CacheBreakpoint(1, True, 3600), CacheBreakpoint(5, True, 300)]
    parsed = parse_chat(chat)  # the gateway's own OpenAI path takes it as is
    assert parsed.messages[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert parsed.template_kwargs["tools"] == chat["tools"]


def test_sdk_built_request_parses_the_same() -> None:
    sent: list[dict] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(orjson.loads(request.content))
        return httpx2.Response(200, json=from_openai_response(CHAT_COMPLETION, "qwen"))

    kwargs = {k: v for k, v in copy.deepcopy(CONVERSATION).items() if k != "stream"}
    # this SDK version has no sampling parameters; older ones and raw clients send them
    sampling = {name: kwargs.pop(name) for name in ("temperature", "top_p", "top_k")}
    with sdk_client(handler) as client:
        client.messages.create(**kwargs, extra_body=sampling)
    expected = {**EXPECTED_CHAT}
    for name in ("stream", "stream_options"):
        del expected[name]
    assert to_openai_chat(parse_messages_request(sent[0])) == expected


@pytest.mark.parametrize(
    ("body", "options"),
    [
        (body_with(), {}),
        (body_with(tools=[WEATHER], tool_choice={"type": "any"}), {"tool_choice": "required"}),
        (body_with(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}),
         {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
        (body_with(tools=[WEATHER], tool_choice={"type": "none"}), {"tool_choice": "none"}),
        (body_with(tool_choice={"type": "auto"}), {}),  # engines reject tool_choice alone
        (body_with(messages=[user(text("Say hi")), {"role": "assistant", "content": "Hi,"}]),
         {"add_generation_prompt": False, "continue_final_message": True}),
    ],
)
def test_options(body: dict, options: dict) -> None:
    chat = to_openai_chat(parse_messages_request(body))
    extra = {k: v for k, v in chat.items() if k not in ("model", "messages", "max_tokens",
                                                        "tools")}
    assert extra == options


def test_text_blocks_join_like_vllm_and_tool_only_turns_have_null_content() -> None:
    body = body_with(system="", messages=[
        user(text("a"), text(""), text("b")),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {}}]},
        user({"type": "tool_result", "tool_use_id": "t1"}),
    ])
    assert parse_messages_request(body).messages == [
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": ""},
    ]


def _assistant_call(call_id: str, cache: dict | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_use", "id": call_id, "name": "get_weather",
                             "input": {"city": "Oslo"}}
    if cache:
        block["cache_control"] = cache
    return {"role": "assistant", "content": [block]}


def _result(call_id: str, cache: dict | None = None, inner: dict | None = None) -> dict:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id,
                             "content": [text("ok", inner)]}
    if cache:
        block["cache_control"] = cache
    return block


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (body_with(tools=[{**WEATHER, "cache_control": EPHEMERAL}]), [(0, True, 300)]),
        (body_with(system=[text("s", EPHEMERAL)]), [(1, False, 300)]),
        (body_with(messages=[user(text("q", {"type": "ephemeral", "ttl": "1h"}))]),
         [(1, False, 3600)]),
        (body_with(messages=[user(text("q")), _assistant_call("c", EPHEMERAL)]),
         [(2, False, 300)]),
        # tool results go before the text of their message: prefixes follow the chat order
        (body_with(messages=[user(text("q")), _assistant_call("c"),
                             user(text("more", EPHEMERAL), _result("c", EPHEMERAL))]),
         [(3, False, 300), (4, False, 300)]),
        (body_with(messages=[user(text("q")), _assistant_call("c"),
                             user(_result("c", inner=EPHEMERAL))]), [(3, False, 300)]),
        (body_with(tools=[WEATHER], system=[text("s")],
                   messages=[user(text("a", EPHEMERAL)), {"role": "assistant", "content": "b"},
                             user(text("c", EPHEMERAL))]),
         [(2, True, 300), (4, True, 300)]),
        # top-level cache_control marks the last block, unless a breakpoint already closes it
        (body_with(system=[text("s", EPHEMERAL)], cache_control={"type": "ephemeral",
                                                                 "ttl": "5m"}),
         [(1, False, 300), (2, False, 300)]),
        (body_with(messages=[user(text("q", {"type": "ephemeral", "ttl": "1h"}))],
                   cache_control=EPHEMERAL), [(1, False, 3600)]),
        (body_with(cache_control={"type": "ephemeral", "ttl": "1h"}), [(1, False, 3600)]),
    ],
    ids=["tool", "system", "user-1h", "tool_use", "result-before-text", "nested", "tools-flag",
         "top-level", "top-level-on-marked-end", "top-level-only"],
)
def test_breakpoint_positions(body: dict, expected: list[tuple[int, bool, int]]) -> None:
    assert parse_messages_request(body).breakpoints == [CacheBreakpoint(*e) for e in expected]


# --- responses ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("usage", "breakpoint_tokens", "expected"),
    [
        ({"prompt_tokens": 100, "completion_tokens": 7}, 0, (100, 0, 0, 7)),
        ({"prompt_tokens": 100, "completion_tokens": 7,
          "prompt_tokens_details": {"cached_tokens": 64}}, 0, (36, 0, 64, 7)),
        ({"prompt_tokens": 100, "completion_tokens": 7}, 80, (20, 80, 0, 7)),
        ({"prompt_tokens": 100, "completion_tokens": 7,
          "prompt_tokens_details": {"cached_tokens": 64}}, 80, (20, 16, 64, 7)),
        ({"prompt_tokens": 100, "completion_tokens": 7,
          "prompt_tokens_details": {"cached_tokens": 64}}, 50, (36, 0, 64, 7)),
        ({"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": None},
         100, (0, 100, 0, 7)),
        (None, 80, (0, 0, 0, 0)),
    ],
)
def test_usage_mapping(usage: dict | None, breakpoint_tokens: int,
                       expected: tuple[int, int, int, int]) -> None:
    mapped = anthropic_usage(usage, breakpoint_tokens)
    assert (mapped["input_tokens"], mapped["cache_creation_input_tokens"],
            mapped["cache_read_input_tokens"], mapped["output_tokens"]) == expected
    if usage:  # Anthropic: the three input counts add up to the whole prompt
        assert sum(v for k, v in mapped.items() if "input" in k) == usage["prompt_tokens"]


CHAT_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-42", "object": "chat.completion", "model": "qwen-engine",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me check.",
        "tool_calls": [{"id": "chatcmpl-tool-9", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]}}],
    "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62,
              "prompt_tokens_details": {"cached_tokens": 32}},
}


def test_completion_becomes_sdk_message() -> None:
    body = from_openai_response(CHAT_COMPLETION, "qwen", breakpoint_tokens=40)
    with sdk_client(lambda request: httpx2.Response(200, json=body)) as client:
        message = client.messages.create(model="qwen", max_tokens=64,
                                         messages=[{"role": "user", "content": "Paris?"}])
    assert message.id == "msg_42"
    assert message.model == "qwen"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Let me check."
    tool = message.content[1]
    assert (tool.id, tool.name, tool.input) == ("chatcmpl-tool-9", "get_weather",
                                                {"city": "Paris"})
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 10
    assert message.usage.cache_creation_input_tokens == 8
    assert message.usage.cache_read_input_tokens == 32
    assert message.usage.output_tokens == 12


@pytest.mark.parametrize(
    ("choice", "stop_reason", "stop_sequence"),
    [
        ({"finish_reason": "stop"}, "end_turn", None),
        ({"finish_reason": "stop", "stop_reason": None}, "end_turn", None),
        ({"finish_reason": "stop", "stop_reason": 151645}, "end_turn", None),
        ({"finish_reason": "stop", "stop_reason": "###"}, "stop_sequence", "###"),
        ({"finish_reason": "stop", "matched_stop": "###"}, "stop_sequence", "###"),
        ({"finish_reason": "length"}, "max_tokens", None),
        ({"finish_reason": "content_filter"}, "refusal", None),
        ({"finish_reason": "abort"}, "end_turn", None),
    ],
)
def test_stop_reasons(choice: dict, stop_reason: str, stop_sequence: str | None) -> None:
    body = {"choices": [{"index": 0, "message": {"content": "x"}, **choice}]}
    message = from_openai_response(body, "m")
    assert (message["stop_reason"], message["stop_sequence"]) == (stop_reason, stop_sequence)
    assert message["id"].startswith("msg_")


def test_empty_completion_and_bad_tool_arguments() -> None:
    body = {"choices": [{"finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "not json"}}]}}]}
    assert from_openai_response(body, "m")["content"] == [
        {"type": "tool_use", "id": "c", "name": "f", "input": {}}]
    assert from_openai_response({"choices": []}, "m")["content"] == []


# --- streaming ------------------------------------------------------------------------------

def _chunk(delta: dict | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
    body = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1,
            "model": "qwen-engine", "choices": [{**choice, **extra}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = {"prompt_tokens": 120, "completion_tokens": 17, "total_tokens": 137,
         "prompt_tokens_details": {"cached_tokens": 96}}
VLLM_STREAM = b"".join([
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Hello"}),
    _chunk({"content": ", wörld"}),
    _chunk({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    _chunk({}, "tool_calls", stop_reason=None),
    b'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","choices":[],"usage":'
    + orjson.dumps(USAGE) + b"}\n\n",
    b"data: [DONE]\n\n",
])


def _translate(stream: bytes, sizes: tuple[int, ...] = (1,), breakpoint_tokens: int = 0
               ) -> bytes:
    translator = StreamTranslator("qwen", breakpoint_tokens)
    out: list[bytes] = []
    position, cycle = 0, itertools.cycle(sizes)
    while position < len(stream):
        size = next(cycle)
        out += translator.feed(stream[position:position + size])
        position += size
    out += translator.finish()
    return b"".join(out)


def _events(sse: bytes) -> list[tuple[str, dict]]:
    events = []
    for frame in sse.split(b"\n\n")[:-1]:
        name, data = frame.split(b"\n")
        events.append((name.removeprefix(b"event: ").decode(),
                       orjson.loads(data.removeprefix(b"data: "))))
    return events


def _sdk_final_message(sse: bytes) -> anthropic.types.Message:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=sse)

    with sdk_client(handler) as client, client.messages.stream(
            model="qwen", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as stream:
        return stream.get_final_message()


@pytest.mark.parametrize("sizes", [(1,), (3, 7, 13), (64,), (len(VLLM_STREAM),)])
def test_stream_translates_through_the_sdk(sizes: tuple[int, ...]) -> None:
    sse = _translate(VLLM_STREAM, sizes, breakpoint_tokens=110)
    assert sse == _translate(VLLM_STREAM, (len(VLLM_STREAM),), breakpoint_tokens=110)
    assert [name for name, _ in _events(sse)] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    message = _sdk_final_message(sse)
    assert message.id == "msg_abc"
    assert message.model == "qwen"
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello, wörld"
    assert message.content[1].type == "tool_use"
    assert (message.content[1].id, message.content[1].name, message.content[1].input) == (
        "chatcmpl-tool-1", "get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use"
    usage = message.usage
    assert (usage.input_tokens, usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens, usage.output_tokens) == (10, 14, 96, 17)


def test_stream_with_crlf_framing_and_stop_sequence() -> None:
    stream = b"".join([_chunk({"role": "assistant", "content": "A"}), _chunk({"content": "B"}),
                       _chunk({}, "stop", stop_reason="###"), b"data: [DONE]\n\n"])
    sse = _translate(stream.replace(b"\n", b"\r\n"), (5, 2))
    message = _sdk_final_message(sse)
    assert message.content[0].text == "AB"
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "###")
    assert message.usage.output_tokens == 0  # no usage chunk: zeros, not a failure


def test_stream_without_done_finishes_on_eof_even_mid_frame() -> None:
    stream = _chunk({"content": "x"}) + _chunk({}, "length").rstrip(b"\n")
    message = _sdk_final_message(_translate(stream, (4,)))
    assert (message.content[0].text, message.stop_reason) == ("x", "max_tokens")


def test_upstream_error_event_ends_the_stream() -> None:
    translator = StreamTranslator("qwen")
    out = translator.feed(_chunk({"content": "par"}))
    out += translator.feed(b'data: {"error": {"message": "engine died", '
                           b'"type": "InternalServerError", "code": 500}}\n\n')
    assert translator.feed(_chunk({"content": "tial"})) == []
    assert translator.finish() == []
    name, data = _events(b"".join(out))[-1]
    assert (name, data) == ("error", {"type": "error", "error": {
        "type": "api_error", "message": "engine died"}})
    with pytest.raises(anthropic.APIStatusError, match="engine died"):
        _sdk_final_message(b"".join(out))


def test_truncated_upstream_stream_is_an_error() -> None:
    events = _events(_translate(_chunk({"content": "par"})))
    assert [name for name, _ in events] == ["message_start", "content_block_start",
                                            "content_block_delta", "error"]
    assert events[-1][1]["error"]["type"] == "api_error"


def test_malformed_upstream_event_is_an_error() -> None:
    events = _events(_translate(b"data: {not json\n\n"))
    assert [(name, data["error"]["type"]) for name, data in events] == [("error", "api_error")]


def test_bad_request_code_in_stream_error() -> None:
    events = _events(_translate(b'data: {"error": {"message": "too long", "code": 400}}\n\n'))
    assert events == [("error", {"type": "error", "error": {
        "type": "invalid_request_error", "message": "too long"}})]


def test_anthropic_error_sse_frame() -> None:
    frame = AnthropicError(529, "overloaded_error", "Overloaded").sse()
    assert frame == (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
                     b'"message":"Overloaded"}}\n\n')
