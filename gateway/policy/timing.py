"""The gateway's model of engine time: how long a prefill and a decode step take.

    prefill(T) = Σ over chunks c of (a + b·c + q·c²)     T uncached tokens, chunks of ≤ C tokens
    decode_step(p) = max(d_min, d0 + d1·p + d2·p²)       p = fraction of the KV cache in use

An engine with chunked prefill runs at most ``C`` (``max_num_batched_tokens``) prompt tokens
a step, so the quadratic attention term grows per chunk, not with the whole prompt, and
every step of a prefill also carries the running decodes. Prefills queued behind others
share steps, so they add the per-step overhead only in proportion to the tokens they
bring (``queued_prefill_s``).

Default constants are NVIDIA Dynamo's mocker fit (prefill_ms = 4.21e-7·T² + 1.518e-2·T +
16.5; ITL_ms = −25.74·p² + 54.01·p + 5.74, at least 1 ms), the same default profile the
simulated engine uses. Routing decisions depend on the *shape* of this model more than its
scale (a uniform error scales every candidate's cost alike); the fleet also corrects its
queue predictions from observed first-token times.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineTiming:
    prefill_fixed_s: float = 16.50142e-3
    prefill_per_token_s: float = 1.518344e-5
    prefill_per_token2_s: float = 4.209989e-10
    chunk_tokens: int = 8192
    decode_c0_s: float = 5.74e-3
    decode_c1_s: float = 54.01e-3
    decode_c2_s: float = -25.74e-3
    decode_min_s: float = 1e-3

    def _chunk_s(self, tokens: int) -> float:
        return (self.prefill_fixed_s + self.prefill_per_token_s * tokens
                + self.prefill_per_token2_s * tokens * tokens)

    def prefill_s(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` uncached prompt tokens, alone on the engine."""
        if tokens <= 0:
            return 0.0
        full, rest = divmod(tokens, self.chunk_tokens)
        return full * self._chunk_s(self.chunk_tokens) + (self._chunk_s(rest) if rest else 0.0)

    def queued_prefill_s(self, tokens: int, queue_empty: bool) -> float:
        """Prefill time a request adds to a worker. Behind other prefills it shares their
        steps (continuous batching): it pays the per-step overhead only for the share of
        a step's ``chunk_tokens`` it fills, not a whole step of its own."""
        if queue_empty or tokens <= 0:
            return self.prefill_s(tokens)
        steps = self.prefill_steps(tokens)
        shared = self.prefill_fixed_s * (tokens / self.chunk_tokens - steps)
        return max(self.prefill_s(tokens) + shared, 0.0)

    def prefill_steps(self, tokens: int) -> int:
        return -(-tokens // self.chunk_tokens) if tokens > 0 else 0

    def decode_step_s(self, kv_fraction: float) -> float:
        p = min(max(kv_fraction, 0.0), 1.0)
        return max(self.decode_min_s, self.decode_c0_s + self.decode_c1_s * p
                   + self.decode_c2_s * p * p)
