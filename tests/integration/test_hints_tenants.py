"""Cache hints, sessions, tenants and the Anthropic API, through real processes."""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from loadtest.procs import running, start_gateway, wait_until
from tests.integration.conftest import Stack

LONG_SYSTEM = ("You are the archivist of a maritime museum. You answer questions about ships, "
               "ports and navigation instruments, quoting catalogue numbers when you can. ")


def unique_system(repeat: int = 15) -> str:
    return f"[{uuid.uuid4().hex}] " + LONG_SYSTEM * repeat


def test_conversations_with_cache_keys_stay_on_their_worker(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.gateway + "/v1", api_key="none", max_retries=0,
                           timeout=30)
    # A long shared prompt: leaving a session's worker costs re-prefilling it, far more
    # than the timing noise of a busy 2-core test machine.
    system = unique_system(60)

    def conversation(i: int) -> set[str]:
        messages = [{"role": "system", "content": system}]
        workers = set()
        for turn in range(3):
            messages.append({"role": "user", "content": f"conversation {i}, question {turn}"})
            raw = client.chat.completions.with_raw_response.create(
                model="qwen3", messages=messages, max_tokens=4,
                extra_body={"prompt_cache_key": f"conv-{i}"})
            workers.add(raw.headers["x-radixgate-worker"])
            messages.append({"role": "assistant",
                             "content": raw.parse().choices[0].message.content})
        return workers

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        placements = list(pool.map(conversation, range(20), timeout=60))
    assert all(len(p) == 1 for p in placements), placements
    # (Leaving a saturated worker is covered by the policy's unit tests and the simulator.)


@pytest.fixture(scope="module")
def tenant_gateways(stack: Stack, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("tenants")
    keys = tmp / "keys.txt"
    keys.write_text("# tenant:key\nalice:key-alice\nbob:key-bob\n")
    isolated = start_gateway(tmp, stack.workers, "--api-keys", str(keys), "--cache-isolation",
                             "tenant", "--admin-key", "admin-secret")
    shared = start_gateway(tmp, stack.workers, "--api-keys", str(keys))
    with running(isolated[0], shared[0]):
        yield {"tenant": isolated[1], "shared": shared[1]}


def cached_tokens(url: str, key: str, system: str) -> int:
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)
    reply = client.chat.completions.create(
        model="qwen3", max_tokens=2,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}])
    return reply.usage.prompt_tokens_details.cached_tokens


@pytest.mark.parametrize(("mode", "bob_hits"), [("tenant", False), ("shared", True)])
def test_tenant_isolation(tenant_gateways: dict[str, str], mode: str, bob_hits: bool) -> None:
    url, system = tenant_gateways[mode], unique_system()
    assert cached_tokens(url, "key-alice", system) == 0
    assert cached_tokens(url, "key-alice", system) > 0  # alice's repeat hits
    assert (cached_tokens(url, "key-bob", system) > 0) is bob_hits


def test_missing_or_wrong_keys_get_401_in_each_api_shape(tenant_gateways: dict[str, str]
                                                         ) -> None:
    url = tenant_gateways["tenant"]
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    for headers in ({}, {"authorization": "Bearer nope"}):
        r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = httpx.post(url + "/v1/messages", json=body, headers=headers)
        assert r.status_code == 401
        assert r.json() == {"type": "error", "error": {"type": "authentication_error",
                                                       "message": r.json()["error"]["message"]}}
    assert httpx.get(url + "/admin/workers", headers={"authorization": "Bearer key-alice"}
                     ).status_code == 403
    assert httpx.get(url + "/admin/workers", headers={"authorization": "Bearer admin-secret"}
                     ).status_code == 200
    assert httpx.get(url + "/health").status_code == 200  # probes stay open
    metrics = httpx.get(url + "/metrics").text
    assert 'radixgate_tenant_requests_total{tenant="alice"}' in metrics


def test_anthropic_sdk_cache_control_reports_cache_reads(stack: Stack) -> None:
    client = anthropic.Anthropic(base_url=stack.gateway, api_key="none", max_retries=0,
                                 timeout=30)
    system = [{"type": "text", "text": unique_system(), "cache_control": {"type": "ephemeral"}}]
    first = client.messages.create(model="qwen3", max_tokens=8, system=system,
                                   messages=[{"role": "user", "content": "first question"}])
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens > 0
    second = client.messages.create(model="qwen3", max_tokens=8, system=system,
                                    messages=[{"role": "user", "content": "second question"}])
    assert second.usage.cache_read_input_tokens > 0
    assert second.content[0].type == "text" and second.content[0].text
    assert second.stop_reason == "max_tokens"
    workers = httpx.get(stack.gateway + "/admin/workers").json()
    assert workers["pinned_prefixes"] >= 1  # the breakpoint's prefix is held for its TTL

    with client.messages.stream(model="qwen3", max_tokens=6, system=system,
                                messages=[{"role": "user", "content": "stream it"}]) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_delta" in events
    assert final.usage.output_tokens == 6 and final.usage.cache_read_input_tokens > 0


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
         "image"),
        ({"max_tokens": 5, "system": [{"type": "text", "text": "x",
                                       "cache_control": {"type": "persistent"}}],
          "messages": [{"role": "user", "content": "x"}]}, "cache_control"),
        ({"max_tokens": 5, "system": [{"type": "text", "text": "x",
                                       "cache_control": {"type": "ephemeral", "ttl": "2h"}}],
          "messages": [{"role": "user", "content": "x"}]}, "ttl"),
        ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]}, "role"),
    ],
)
def test_anthropic_bad_inputs_get_anthropic_errors(stack: Stack, body: dict,
                                                   fragment: str) -> None:
    r = httpx.post(stack.gateway + "/v1/messages", json={"model": "qwen3", **body})
    assert r.status_code == 400
    payload = r.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert fragment in payload["error"]["message"]


def test_bad_openai_hints_are_rejected(stack: Stack) -> None:
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    for extra, param in (({"cache_salt": "a/b"}, "cache_salt"),
                         ({"prompt_cache_key": 17}, "prompt_cache_key")):
        r = httpx.post(stack.gateway + "/v1/chat/completions", json={**body, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param




def test_sessions_leave_a_worker_saturated_behind_the_gateways_back(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A worker flooded by traffic the gateway never saw (as from another gateway) reports
    a long queue on /metrics; sessions homed there overflow to the other worker."""
    from tests.integration.conftest import make_stack

    stack = make_stack(tmp_path_factory, 2, sim_args=("--max-num-seqs", "2"))
    client = openai.OpenAI(base_url=stack.gateway + "/v1", api_key="none", max_retries=0,
                           timeout=60)
    system = unique_system(60)
    history = {i: [{"role": "system", "content": system}] for i in range(8)}

    def turn(i: int) -> str:
        history[i].append({"role": "user", "content": f"conversation {i} asks again"})
        raw = client.chat.completions.with_raw_response.create(
            model="qwen3", messages=history[i], max_tokens=2,
            extra_body={"prompt_cache_key": f"sat-{i}"})
        history[i].append({"role": "assistant", "content": raw.parse().choices[0]
                           .message.content})
        return raw.headers["x-radixgate-worker"]

    flood: list[httpx.Response] = []
    flooder = httpx.Client(timeout=60)
    try:
        homes = {i: turn(i) for i in range(8)}
        busy = max(set(homes.values()), key=list(homes.values()).count)
        busy_url = next(u for u in stack.workers if u.endswith(busy.rsplit(":", 1)[1]))
        for k in range(24):  # long generations straight to the engine: a queue builds up
            request = flooder.build_request(
                "POST", busy_url + "/v1/completions",
                json={"model": "qwen3", "prompt": f"flood {k}", "max_tokens": 20000,
                      "ignore_eos": True, "stream": True})
            flood.append(flooder.send(request, stream=True))
        assert wait_until(lambda: any(w["engine_external_waiting"] > 5 for w in httpx.get(
            stack.gateway + "/admin/workers").json()["workers"]), 10)
        moved = [i for i, home in homes.items() if home == busy and turn(i) != busy]
        assert len(moved) == sum(home == busy for home in homes.values()), (homes, moved)
    finally:
        for response in flood:
            response.close()
        flooder.close()
        for p in stack.procs:
            p.stop()
