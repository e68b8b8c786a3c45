"""Live open-loop load against any OpenAI-compatible endpoint.

Requests start at their workload arrival times whether or not earlier ones finished (open
loop: a slow server sees its queue grow, as in production). Every request streams, with
``stream_options.include_usage`` so that cached tokens are reported, and ``max_tokens`` +
``ignore_eos`` so output lengths follow the workload. Measured per request: time to first
token, inter-token latencies, end-to-end latency, output tokens, cached prompt tokens, the
worker that served it (``x-radixgate-worker``, when present), and errors or rejections.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict, dataclass

import httpx
import numpy as np
import orjson

from loadtest.workloads import WorkItem


@dataclass
class RequestRecord:
    index: int
    start_s: float
    ok: bool = False
    status: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_mean_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    worker: str | None = None
    error: str | None = None
    itls: list[float] | None = None


class WordText:
    """Token index → one whole-word token of the fleet's tokenizer (" word")."""

    def __init__(self, tokenizer_dir: str | None) -> None:
        from tokenizers import Tokenizer

        from workers.sim.text import OutputVocab

        tok = Tokenizer.from_file(f"{tokenizer_dir}/tokenizer.json") if tokenizer_dir else None
        vocab = OutputVocab(tok, limit=1 << 16)
        self._words = np.array(vocab._text, dtype=object)

    def text(self, ids: np.ndarray) -> str:
        return "".join(self._words[ids % len(self._words)])


ROLE_FOR_API = {"tool": "user"}


def request_body(item: WorkItem, words: WordText, model: str, api: str) -> dict:
    common = {"model": model, "max_tokens": item.output_tokens, "ignore_eos": True,
              "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
    if api == "completions":
        return {**common, "prompt": words.text(item.token_ids())}
    messages = [{"role": ROLE_FOR_API.get(role, role), "content": words.text(ids)}
                for role, ids in item.segments()]
    return {**common, "messages": messages}


async def _one(client: httpx.AsyncClient, url: str, body: dict, record: RequestRecord,
               t0: float, timeout: float) -> None:
    start = time.perf_counter()
    last = None
    itls: list[float] = []
    try:
        async with client.stream("POST", url, json=body, timeout=timeout) as response:
            record.status = response.status_code
            record.worker = response.headers.get("x-radixgate-worker")
            if response.status_code != 200:
                record.error = (await response.aread()).decode(errors="replace")[:300]
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = orjson.loads(line[6:])
                if "error" in event:
                    record.error = str(event["error"])[:300]
                    return
                choices = event.get("choices") or []
                text = choices[0].get("delta", {}).get("content") if choices and "delta" in \
                    choices[0] else (choices[0].get("text") if choices else None)
                now = time.perf_counter()
                if text:
                    if last is None:
                        record.ttft_s = now - start
                    else:
                        itls.append(now - last)
                    last = now
                usage = event.get("usage")
                if usage:
                    record.prompt_tokens = usage.get("prompt_tokens", 0)
                    record.output_tokens = usage.get("completion_tokens", 0)
                    record.cached_tokens = (usage.get("prompt_tokens_details") or {}).get(
                        "cached_tokens") or 0
        record.ok = record.ttft_s is not None
    except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        record.e2e_s = time.perf_counter() - start
        record.itl_mean_s = float(np.mean(itls)) if itls else None
        record.itls = itls


async def run_live(target: str, items: list[WorkItem], words: WordText, model: str,
                   api: str = "chat", timeout: float = 600.0, progress: bool = True
                   ) -> list[RequestRecord]:
    path = "/v1/completions" if api == "completions" else "/v1/chat/completions"
    url = target.rstrip("/").removesuffix("/v1") + path
    records = [RequestRecord(i, item.at) for i, item in enumerate(items)]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    async with httpx.AsyncClient(limits=limits) as client:
        t0 = time.perf_counter()
        tasks = []
        for item, record in zip(items, records, strict=True):
            delay = item.at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            body = request_body(item, words, model, api)
            tasks.append(asyncio.create_task(_one(client, url, body, record, t0, timeout)))
            if progress:
                _progress(records, len(tasks), len(items))
        while progress and not all(t.done() for t in tasks):
            _progress(records, len(tasks), len(items))
            await asyncio.sleep(0.5)
        await asyncio.gather(*tasks)
    if progress:
        _progress(records, len(tasks), len(items))
        print(file=sys.stderr)
    return records


def _progress(records: list[RequestRecord], started: int, total: int) -> None:
    done = sum(r.e2e_s is not None for r in records)
    errors = sum(r.e2e_s is not None and not r.ok for r in records)
    width = 30
    bar = "#" * int(width * done / max(total, 1))
    print(f"\r[{bar:<{width}}] {done}/{total} done, {started - done} in flight, "
          f"{errors} errors", end="", file=sys.stderr, flush=True)


def summarize(records: list[RequestRecord], wall_s: float | None = None) -> dict:
    ok = [r for r in records if r.ok]
    ttft = np.array([r.ttft_s for r in ok]) if ok else np.zeros(1)
    itl = np.array([x for r in ok for x in (r.itls or [])]) if ok else np.zeros(1)
    if itl.size == 0:
        itl = np.zeros(1)
    e2e = np.array([r.e2e_s for r in ok]) if ok else np.zeros(1)
    span = wall_s or max((r.start_s + (r.e2e_s or 0) for r in records), default=1.0)
    prompt = sum(r.prompt_tokens for r in ok)
    return {
        "requests": len(records), "ok": len(ok),
        "errors": sum(not r.ok and r.status not in (429, 503) for r in records),
        "rejected": sum(r.status in (429, 503) for r in records),
        "ttft_mean_s": float(ttft.mean()), "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p90_s": float(np.percentile(ttft, 90)), "ttft_p99_s": float(np.percentile(ttft, 99)),
        "itl_mean_s": float(itl.mean()), "itl_p99_s": float(np.percentile(itl, 99)),
        "e2e_mean_s": float(e2e.mean()), "e2e_p99_s": float(np.percentile(e2e, 99)),
        "throughput_tok_s": sum(r.output_tokens for r in ok) / span,
        "goodput_rps": len(ok) / span,
        "token_hit_rate": sum(r.cached_tokens for r in ok) / prompt if prompt else 0.0,
    }


def rows(records: list[RequestRecord]) -> list[dict]:
    out = []
    for r in records:
        row = asdict(r)
        row.pop("itls")
        out.append(row)
    return out
