"""The official openai SDK against the gateway, unchanged."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.integration.conftest import Stack

SYSTEM = ("You are the support assistant of a bicycle shop. Answer politely, cite the "
          "warranty terms when relevant, and never invent prices. ") * 12


@pytest.fixture
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.gateway + "/v1", api_key="none", max_retries=0,
                         timeout=30)


def test_chat_non_streaming_reports_routing_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="qwen3", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8)
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage.completion_tokens == 8
    assert raw.headers["x-radixgate-worker"]
    assert int(raw.headers["x-radixgate-prefix-tokens"]) >= 0
    assert int(raw.headers["x-radixgate-prompt-tokens"]) == completion.usage.prompt_tokens


def test_chat_streaming_arrives_chunk_by_chunk_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=12, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices]) >= 12
    assert text.strip()
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12


def test_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True))
    assert all(c.usage is None for c in chunks)


def test_multi_turn_conversations_hit_the_cache(client: openai.OpenAI) -> None:
    """Later turns, and new conversations sharing the system prompt, land where it is."""
    reported = []
    for conversation in range(3):
        messages = [{"role": "system", "content": SYSTEM}]
        for turn in range(3):
            messages.append({"role": "user", "content": f"conv {conversation} turn {turn}?"})
            raw = client.chat.completions.with_raw_response.create(
                model="qwen3", messages=messages, max_tokens=6)
            reply = raw.parse()
            cached = reply.usage.prompt_tokens_details.cached_tokens
            reported.append((conversation, turn, cached, int(raw.headers[
                "x-radixgate-prefix-tokens"])))
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    later = [r for r in reported if (r[0], r[1]) != (0, 0)]
    assert all(cached > 0 for _, _, cached, _ in later), reported
    # The gateway's prediction never claims more than the engine actually had.
    assert all(predicted <= cached for _, _, cached, predicted in later), reported


def test_completions_with_text_and_token_ids(client: openai.OpenAI) -> None:
    text = client.completions.create(model="qwen3", prompt="Once upon a time", max_tokens=5)
    assert text.choices[0].text and text.usage.completion_tokens == 5
    ids = client.completions.create(model="qwen3", prompt=list(range(100, 400)), max_tokens=3)
    assert ids.usage.prompt_tokens == 300
    again = client.completions.create(model="qwen3", prompt=list(range(100, 400)), max_tokens=3)
    assert again.usage.prompt_tokens_details.cached_tokens == 288


def test_models_and_service_endpoints(stack: Stack, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["qwen3"]
    assert httpx.get(stack.gateway + "/health").status_code == 200
    ready = httpx.get(stack.gateway + "/ready")
    assert ready.status_code == 200 and ready.json()["healthy_workers"] == 2
    metrics = httpx.get(stack.gateway + "/metrics").text
    for name in ("radixgate_requests_total", "radixgate_routing_decisions_total",
                 "radixgate_worker_events_live",
                 "radixgate_index_blocks", "radixgate_worker_in_flight",
                 "radixgate_cached_tokens_total"):
        assert name in metrics
    workers = httpx.get(stack.gateway + "/admin/workers").json()["workers"]
    assert {"id", "url", "healthy", "in_flight_requests", "in_flight_tokens",
            "indexed_blocks"} <= set(workers[0])


def test_request_id_is_echoed(stack: Stack) -> None:
    r = httpx.post(stack.gateway + "/v1/chat/completions", headers={"x-request-id": "abc-123"},
                   json={"model": "qwen3", "messages": [{"role": "user", "content": "x"}],
                         "max_tokens": 1})
    assert r.headers["x-request-id"] == "abc-123"
