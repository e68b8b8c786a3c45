"""`radixgate up`: workers started, registered, restarted after a crash, all stopped."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import openai

from loadtest.procs import Proc, free_port, radixgate, wait_until


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def workers(url: str) -> list[dict]:
    return httpx.get(url + "/admin/workers", timeout=5).json()["workers"]


def test_up_restarts_a_crashed_worker_and_stops_everything(tmp_path: Path) -> None:
    port = free_port()
    up = Proc(radixgate("up", "--workers", "2", "--port", str(port), "--speed", "20",
                        "--num-blocks", "2048", "--health-interval", "0.5"),
              tmp_path / "up.log")
    url = f"http://127.0.0.1:{port}"
    try:
        up.wait_ready(url + "/ready", timeout=60)
        assert wait_until(lambda: len(children(up.pid)) == 2, 10)
        assert wait_until(lambda: "radixgate is up" in up.log.read_text(), 5)
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=30)
        reply = client.chat.completions.create(
            model="qwen3", messages=[{"role": "user", "content": "hello"}], max_tokens=3)
        assert reply.usage.completion_tokens == 3

        victim = children(up.pid)[0]
        os.kill(victim, signal.SIGKILL)
        assert wait_until(lambda: any(not w["healthy"] for w in workers(url)), 10)
        assert wait_until(lambda: all(w["healthy"] for w in workers(url))
                          and victim not in children(up.pid), 30), up.log.read_text()[-2000:]
        reply = client.chat.completions.create(
            model="qwen3", messages=[{"role": "user", "content": "again"}], max_tokens=3)
        assert reply.usage.completion_tokens == 3

        kids = children(up.pid)
        assert up.stop(timeout=20) == 0
        assert wait_until(lambda: not any(alive(k) for k in kids), 10)
    finally:
        up.kill()
