"""GatewayConfig: every knob of one gateway, with the defaults a fresh machine needs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gateway.policy.timing import EngineTiming

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER = REPO_ROOT / ".cache" / "tokenizers" / "qwen3"


def default_tokenizer() -> str:
    """``$RADIXGATE_TOKENIZER`` or the Qwen3 tokenizer ``make`` fetches into ``.cache/``."""
    return os.environ.get("RADIXGATE_TOKENIZER") or str(DEFAULT_TOKENIZER)


@dataclass
class WorkerSpec:
    url: str
    worker_id: str | None = None
    capacity_blocks: int | None = None


@dataclass
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    workers: list[WorkerSpec] = field(default_factory=list)
    policy: str = "cache_aware"
    tokenizer: str = field(default_factory=default_tokenizer)
    model: str | None = None
    """Served model name; ``None``: learn it from the workers' ``/v1/models``."""
    max_model_len: int | None = None
    """Context length; ``None``: learn it from the workers (``max_model_len``), else 32768."""
    block_size: int = 16
    capacity_blocks: int = 16384
    """Default per-worker KV capacity in blocks, when a worker does not say."""
    max_running: int = 256
    index_max_entries: int = 64 << 20
    max_body_bytes: int = 16 << 20
    default_max_tokens: int = 256
    """Expected output length for routing when a request sets no ``max_tokens``."""
    health_interval_s: float = 2.0
    connect_timeout_s: float = 5.0
    upstream_timeout_s: float = 600.0
    max_attempts: int = 3
    upstream_transport: str = "aiohttp"
    """``aiohttp`` (httpx API over aiohttp's pool) or ``httpx`` (httpx's own pool)."""
    index_mode: str = "hybrid"
    """``approximate``, ``precise`` or ``hybrid``: see gateway/events_hub.py."""
    cache_isolation: str = "shared"
    """``shared``, or ``tenant``: each tenant's prompts carry its own cache salt."""
    api_keys_file: str | None = None
    admin_key: str | None = None
    timing: EngineTiming = field(default_factory=EngineTiming)
    seed: int | None = None
