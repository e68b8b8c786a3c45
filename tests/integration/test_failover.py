"""Workers dying under traffic and clients going away."""

from __future__ import annotations

import concurrent.futures
import re
import time

import httpx
import openai

from loadtest.procs import wait_until
from tests.integration.conftest import Stack

SYSTEM = "You are a meticulous assistant for a large hardware catalogue. " * 20


def running_requests(worker_url: str) -> float:
    text = httpx.get(worker_url + "/metrics", timeout=5).text
    match = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M)
    return float(match.group(1)) if match else -1.0


def test_killed_worker_under_traffic(fresh_stack: Stack) -> None:
    """Requests in flight and after the kill all finish: retried before their first byte,
    or ended with an error event if the worker dies mid-stream; new ones go elsewhere."""
    client = openai.OpenAI(base_url=fresh_stack.gateway + "/v1", api_key="none",
                           max_retries=0, timeout=30)
    victim_proc, victim_url = fresh_stack.procs[1], fresh_stack.workers[0]

    def one(i: int) -> str:
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"question {i}"}]
        try:
            if i % 2:
                stream = client.chat.completions.create(model="qwen3", messages=messages,
                                                        max_tokens=40, stream=True)
                return "ok" if "".join(c.choices[0].delta.content or "" for c in stream
                                       if c.choices) else "empty"
            client.chat.completions.create(model="qwen3", messages=messages, max_tokens=40)
            return "ok"
        except openai.APIError as exc:
            return f"error: {exc}"

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(one, i) for i in range(60)]
        time.sleep(0.3)
        victim_proc.kill()
        results = [f.result(timeout=60) for f in futures]
    assert time.monotonic() - started < 60
    # Non-streamed requests never see the failure: retried on the survivor. Streams that
    # were mid-flight on the dead worker end with an error event, nothing else fails.
    assert all(r == "ok" for r in results[0::2]), results
    assert all(r == "ok" or "mid-stream" in r for r in results[1::2]), results
    assert results.count("ok") >= 40, results
    # The dead worker is out of rotation; everything new lands on the survivor.
    for i in range(5):
        raw = client.chat.completions.with_raw_response.create(
            model="qwen3", messages=[{"role": "user", "content": f"after {i}"}], max_tokens=2)
        assert raw.headers["x-radixgate-worker"] != victim_url.split("://")[1]
    workers = httpx.get(fresh_stack.gateway + "/admin/workers").json()["workers"]
    assert [w["healthy"] for w in workers].count(False) == 1


def test_client_disconnect_cancels_the_upstream_request(stack: Stack) -> None:
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "go on forever"}],
            "max_tokens": 20000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", stack.gateway + "/v1/chat/completions", json=body,
                      timeout=30) as response:
        worker = response.headers["x-radixgate-worker"]
        lines = response.iter_lines()
        for _ in range(6):
            next(lines)
    url = next(u for u in stack.workers if u.endswith(worker.rsplit(":", 1)[1]))
    assert wait_until(lambda: running_requests(url) == 0, timeout=10)
    gateway_view = httpx.get(stack.gateway + "/admin/workers").json()["workers"]
    assert all(w["in_flight_requests"] == 0 for w in gateway_view)
