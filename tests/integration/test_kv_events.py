"""KV-cache events end to end: simulated vLLM and SGLang engines publish, the gateway's
index follows them (precise mode), survives evictions, and notices engine restarts."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from loadtest.procs import Proc, free_port, radixgate, running, start_gateway, start_sim, wait_until


def completion(gateway: str, prompt: list[int]) -> httpx.Response:
    r = httpx.post(gateway + "/v1/completions", timeout=30,
                   json={"model": "qwen3", "prompt": prompt, "max_tokens": 2})
    r.raise_for_status()
    return r


def events(gateway: str) -> list[dict]:
    workers = httpx.get(gateway + "/admin/workers", timeout=5).json()["workers"]
    return [w["events"] or {} for w in workers]


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_precise_index_follows_engine_events(tmp_path: Path, flavor: str) -> None:
    sims = [start_sim(tmp_path, num_blocks=64, extra=("--flavor", flavor)) for _ in range(2)]
    gw, url = start_gateway(tmp_path, [u for _, u in sims], "--index-mode", "precise")
    with running(gw, *(p for p, _ in sims)):
        assert wait_until(lambda: all(e.get("state") == "live" for e in events(url)), 20)
        prompt = list(range(1000, 1400))  # 25 blocks of 16
        first = completion(url, prompt)
        # The engine's BlockStored events (not the routing decision) put it in the index.
        assert wait_until(lambda: sum(e["stored"] for e in events(url)) >= 24, 10)
        second = completion(url, prompt)
        assert second.headers["x-radixgate-worker"] == first.headers["x-radixgate-worker"]
        predicted = int(second.headers["x-radixgate-prefix-tokens"])
        cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert predicted == cached == 384  # (400 − 1) // 16 blocks of 16
        # Fill the small caches with other prompts: evictions reach the index as events.
        for i in range(8):
            completion(url, list(range(5000 + 500 * i, 5400 + 500 * i)))
        assert wait_until(lambda: sum(e["removed"] for e in events(url)) > 0, 10)
        assert all(e["orphans"] == 0 for e in events(url))
        workers = httpx.get(url + "/admin/workers").json()["workers"]
        assert all(w["indexed_blocks"] <= 64 for w in workers)


def test_engine_restart_is_detected_from_the_event_sequence(tmp_path: Path) -> None:
    http_port, events_port = free_port(), free_port()
    argv = radixgate("sim", "--port", str(http_port), "--speed", "20", "--log-level",
                     "warning", "--kv-events-port", str(events_port))
    sim = Proc(argv, tmp_path / "sim.log")
    worker = f"http://127.0.0.1:{http_port}"
    sim.wait_ready(worker + "/health")
    gw, url = start_gateway(tmp_path, [worker], "--index-mode", "hybrid")
    with running(gw):
        try:
            assert wait_until(lambda: events(url)[0].get("state") == "live", 20)
            for i in range(3):
                completion(url, list(range(100 * i, 100 * i + 300)))
            assert wait_until(lambda: (events(url)[0].get("last_seq") or 0) >= 2, 10)
            blocks = httpx.get(url + "/admin/workers").json()["workers"][0]["indexed_blocks"]
            assert blocks > 0
            sim.stop()  # the engine restarts: its event sequence starts again at 0
            sim = Proc(argv, tmp_path / "sim2.log")
            sim.wait_ready(worker + "/health")
            assert wait_until(lambda: httpx.get(url + "/ready").status_code == 200, 15)
            completion(url, list(range(7000, 7100)))
            assert wait_until(lambda: events(url)[0]["restarts"] >= 1, 15)
            # Only what the new engine stored since is left in the index.
            held = httpx.get(url + "/admin/workers").json()["workers"][0]["indexed_blocks"]
            assert held <= 6
        finally:
            sim.stop()


def test_sglang_flavour_speaks_sglang(tmp_path: Path) -> None:
    proc, url = start_sim(tmp_path, extra=("--flavor", "sglang"))
    with running(proc):
        info = httpx.get(url + "/get_server_info").json()
        assert '"publisher":"zmq"' in info["kv_events_config"]
        r = httpx.post(url + "/generate", json={"input_ids": list(range(100, 300)),
                                                "sampling_params": {"max_new_tokens": 3}})
        again = httpx.post(url + "/generate", json={"input_ids": list(range(100, 300)),
                                                    "sampling_params": {"max_new_tokens": 3}})
        assert r.json()["meta_info"]["completion_tokens"] == 3
        assert again.json()["meta_info"]["cached_tokens"] == 192
        metrics = httpx.get(url + "/metrics").text
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                     "sglang:max_total_num_tokens"):
            assert name in metrics
        assert httpx.post(url + "/flush_cache").status_code == 200
