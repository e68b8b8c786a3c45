"""Bad input gets a clear 4xx in OpenAI's shape; fleet failures get 502/503; no tracebacks."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from loadtest.procs import HOST, running, start_gateway
from tests.integration.conftest import Stack

CHAT = "/v1/chat/completions"


def post(stack: Stack, body: object = None, content: bytes | None = None,
         path: str = CHAT) -> httpx.Response:
    if content is None:
        return httpx.post(stack.gateway + path, json=body, timeout=30)
    return httpx.post(stack.gateway + path, content=content,
                      headers={"content-type": "application/json"}, timeout=30)


def assert_openai_error(r: httpx.Response, status: int, param: str | None = None,
                        code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in r.text
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": USER}, "model", "missing_required_parameter"),
        ({"model": "qwen3"}, "messages", "missing_required_parameter"),
        ({"model": "qwen3", "messages": []}, "messages", "empty_array"),
        ({"model": "qwen3", "messages": "hi"}, "messages", "invalid_type"),
        ({"model": 7, "messages": USER}, "model", "invalid_type"),
        ({"model": "qwen3", "messages": [{"content": "x"}]}, "messages[0].role", None),
        ({"model": "qwen3", "messages": [{"role": "wizard", "content": "x"}]},
         "messages[0].role", "invalid_value"),
        ({"model": "qwen3", "messages": [{"role": "user"}]}, "messages[0].content", None),
        ({"model": "qwen3", "messages": USER, "max_tokens": "ten"}, "max_tokens", "invalid_type"),
        ({"model": "qwen3", "messages": USER, "max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"model": "qwen3", "messages": USER, "temperature": 9}, "temperature", "invalid_value"),
        ({"model": "qwen3", "messages": USER, "stream": "yes"}, "stream", "invalid_type"),
        ({"model": "qwen3", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "messages[0].content", None),
    ],
)
def test_invalid_chat_requests(stack: Stack, body: dict, param: str, code: str | None) -> None:
    assert_openai_error(post(stack, body), 400, param, code)


def test_malformed_json_and_non_objects(stack: Stack) -> None:
    assert_openai_error(post(stack, content=b'{"model": "qwen3", "messages": ['), 400)
    assert_openai_error(post(stack, content=b"[1, 2]"), 400)
    assert_openai_error(post(stack, content=b""), 400)


def test_unknown_model_is_404(stack: Stack) -> None:
    error = assert_openai_error(post(stack, {"model": "gpt-9", "messages": USER}), 404,
                                "model", "model_not_found")
    assert "qwen3" in error["message"]


def test_prompt_over_the_context_length(stack: Stack) -> None:
    prompt = list(range(1, 33000))
    assert_openai_error(post(stack, {"model": "qwen3", "prompt": prompt},
                             path="/v1/completions"), 400, "prompt", "context_length_exceeded")
    body = {"model": "qwen3", "messages": USER, "max_tokens": 40000}
    assert_openai_error(post(stack, body), 400, "messages", "context_length_exceeded")


def test_body_over_the_size_limit_is_413(stack: Stack) -> None:
    big = b'{"model": "qwen3", "messages": [{"role": "user", "content": "' + b"a" * 2_100_000
    assert_openai_error(post(stack, content=big + b'"}]}'), 413, code="request_too_large")


def test_unknown_route_and_method(stack: Stack) -> None:
    assert_openai_error(httpx.get(stack.gateway + "/v1/nothing"), 404)
    assert_openai_error(httpx.get(stack.gateway + CHAT), 405)


def test_invalid_completion_prompt(stack: Stack) -> None:
    assert_openai_error(post(stack, {"model": "qwen3", "prompt": [1, "x"]},
                             path="/v1/completions"), 400, "prompt")


def test_no_healthy_worker_is_503_with_retry_after(tmp_path) -> None:
    dead = f"http://{HOST}:9"  # discard port: nothing listens
    gw, url = start_gateway(tmp_path, [dead], "--model", "qwen3")
    with running(gw):
        r = httpx.post(url + CHAT, json={"model": "qwen3", "messages": USER}, timeout=30)
        assert_openai_error(r, 503, code="no_healthy_worker")
        assert int(r.headers["retry-after"]) > 0
        assert httpx.get(url + "/ready").status_code == 503


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A 'worker' that accepts connections, answers /health, and never answers a request."""
    server = socket.socket()
    server.bind((HOST, 0))
    server.listen(16)
    stop = threading.Event()
    held = []

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            data = conn.recv(65536)
            if data.startswith(b"GET /health"):
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                conn.close()
            else:
                held.append(conn)  # keep it open, say nothing

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://{HOST}:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_upstream_that_never_answers_is_502(tmp_path, black_hole: str) -> None:
    gw, url = start_gateway(tmp_path, [black_hole], "--model", "qwen3",
                            "--upstream-timeout", "1")
    with running(gw):
        r = httpx.post(url + CHAT, json={"model": "qwen3", "messages": USER}, timeout=30)
        assert_openai_error(r, 502, code="upstream_error")
