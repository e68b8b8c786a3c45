"""EngineModel: one vLLM-like replica's cache and timing, pure, with an injected clock.

Scheduling follows vLLM v1: each step has a budget of ``max_batched_tokens``; running
requests go first (a decode takes one token, an unfinished prefill continues in chunks),
then waiting requests are admitted in arrival order while fewer than ``max_num_seqs`` run.
A new request reuses the longest cached prefix of its prompt, in whole blocks and never the
last prompt token (``floor((n − 1) / block_size)`` blocks at most). When blocks run out,
the most recently admitted running request is preempted (recomputed later). The step that
completes a prefill samples that request's first token.

The model does not sleep: ``step(now)`` schedules one step, applies it, and returns its
duration and the tokens it produced, which the driver delivers at ``now + duration``. The
HTTP server drives it with the wall clock (``radixgate sim``); the load-test simulator
drives many of them with a virtual clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gateway.index.keys import block_keys, root_seed
from workers.sim.blocks import BlockPool, EventListener
from workers.sim.profiles import DEFAULT_PROFILE, TimingProfile, get_profile

TOKEN_BYTES = 4


@dataclass(frozen=True)
class EngineConfig:
    num_blocks: int = 16384
    block_size: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    profile: str = DEFAULT_PROFILE


@dataclass(eq=False)
class SimRequest:
    request_id: str
    token_bytes: bytes
    """Prompt token ids, uint32 little-endian."""
    output_tokens: int
    """Tokens to generate before finishing (at least 1)."""
    arrival: float
    salt: str | None = None
    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    computed: int = 0
    """KV tokens computed so far (cached ones included)."""
    target: int = 0
    """KV tokens to prefill before sampling (the prompt; after a preemption, more)."""
    decoding: bool = False
    generated: int = 0
    named: int = 0
    cached_tokens: int | None = None
    first_token_at: float | None = None
    finished: bool = False

    @property
    def prompt_tokens(self) -> int:
        return len(self.token_bytes) // TOKEN_BYTES


@dataclass(frozen=True, slots=True)
class TokenOut:
    request: SimRequest
    index: int
    """0 for the first output token."""
    finished: bool


@dataclass(frozen=True, slots=True)
class StepResult:
    duration: float
    outputs: list[TokenOut]


@dataclass
class EngineCounters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    finished: int = 0


class EngineModel:
    def __init__(self, config: EngineConfig, profile: TimingProfile | None = None,
                 listener: EventListener | None = None) -> None:
        self.config = config
        self.profile = profile or get_profile(config.profile)
        self.pool = BlockPool(config.num_blocks, config.block_size, listener)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.counters = EngineCounters()
        self._seeds: dict[str | None, int] = {}

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: SimRequest) -> None:
        if request.output_tokens < 1:
            raise ValueError("a request must generate at least one token")
        seed = self._seeds.get(request.salt)
        if seed is None:
            seed = self._seeds[request.salt] = root_seed(f"engine/{request.salt or ''}")
        keys = block_keys(request.token_bytes, self.config.block_size, seed)
        request.hashes = [int.from_bytes(keys[i:i + 8], "little") for i in range(0, len(keys), 8)]
        request.target = request.prompt_tokens
        self.waiting.append(request)

    def abort(self, request: SimRequest) -> None:
        if request in self.running:
            self.running.remove(request)
            self.pool.free(request.blocks)
            request.blocks = []
        elif request in self.waiting:
            self.waiting.remove(request)
        request.finished = True

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset()

    # -- one step ----------------------------------------------------------------------
    def step(self, now: float) -> StepResult | None:
        """Schedule, apply and price one step starting at ``now``; ``None`` when idle."""
        budget = self.config.max_batched_tokens
        plan: list[tuple[SimRequest, int]] = []
        budget, preempted = self._schedule_running(plan, budget)
        if not preempted:
            self._schedule_waiting(plan, budget)
        if not plan:
            return None
        kv_fraction = self.pool.usage
        chunks, outputs = [], []
        for request, n in plan:
            if not request.decoding:
                chunks.append((n, request.computed))
                request.computed += n
                self._name_full_blocks(request)
                if request.computed < request.target:
                    continue  # more prefill chunks to come
            else:
                request.computed += 1
            outputs.append(self._sample(request))
        duration = self.profile.step_seconds(chunks, len(outputs), kv_fraction,
                                             len(self.running))
        for out in outputs:
            if out.index == 0:
                out.request.first_token_at = now + duration
        return StepResult(duration, outputs)

    def _schedule_running(self, plan: list, budget: int) -> tuple[int, bool]:
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            n = 1 if request.decoding else min(request.target - request.computed, budget)
            if not self._grow(request, request.computed + n):
                preempted = True
                if request not in self.running:
                    continue  # it was the victim itself
            plan.append((request, n))
            budget -= n
            i += 1
        return budget, preempted

    def _grow(self, request: SimRequest, kv_tokens: int) -> bool:
        """Give ``request`` blocks for ``kv_tokens``, preempting the newest runners if needed.

        Returns False if anything was preempted (``request`` itself possibly)."""
        need = -(-kv_tokens // self.config.block_size) - len(request.blocks)
        clean = True
        while need > 0:
            got = self.pool.allocate(need)
            if got is not None:
                request.blocks.extend(got)
                break
            clean = False
            victim = self.running[-1]
            self._preempt(victim)
            if victim is request:
                break
        return clean

    def _preempt(self, request: SimRequest) -> None:
        self.running.remove(request)
        self.pool.free(request.blocks)
        request.blocks, request.computed, request.named = [], 0, 0
        request.target = request.prompt_tokens + request.generated
        request.decoding = False
        self.waiting.appendleft(request)
        self.counters.preemptions += 1

    def _schedule_waiting(self, plan: list, budget: int) -> None:
        bs = self.config.block_size
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            cap = (request.prompt_tokens - 1) // bs
            hits = self.pool.lookup(request.hashes[:cap])
            self.pool.acquire(hits)
            hit_tokens = len(hits) * bs
            n = min(request.target - hit_tokens, budget)
            fresh = self.pool.allocate(-(-(hit_tokens + n) // bs) - len(hits))
            if fresh is None:
                self.pool.free(hits)
                return  # no room: wait for running requests to finish
            if request.cached_tokens is None:
                request.cached_tokens = hit_tokens
                self.counters.prefix_queries += request.prompt_tokens
                self.counters.prefix_hits += hit_tokens
                self.counters.prompt_tokens += request.prompt_tokens
            request.blocks = hits + fresh
            request.computed = hit_tokens
            request.named = len(hits)
            self.waiting.popleft()
            self.running.append(request)
            plan.append((request, n))
            budget -= n

    def _name_full_blocks(self, request: SimRequest) -> None:
        bs = self.config.block_size
        full = min(request.computed, request.prompt_tokens) // bs
        if full <= request.named:
            return
        start = request.named
        parent = request.hashes[start - 1] if start else None
        tokens = [request.token_bytes[i * bs * TOKEN_BYTES:(i + 1) * bs * TOKEN_BYTES]
                  for i in range(start, full)]
        self.pool.cache(request.blocks[start:full], request.hashes[start:full], parent, tokens)
        request.named = full

    def _sample(self, request: SimRequest) -> TokenOut:
        index = request.generated
        request.generated += 1
        request.decoding = True  # from now on one token a step
        self.counters.generation_tokens += 1
        done = request.generated >= request.output_tokens
        if done:
            self.running.remove(request)
            self.pool.free(request.blocks)
            request.blocks = []
            request.finished = True
            self.counters.finished += 1
        return TokenOut(request, index, done)
