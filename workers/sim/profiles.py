"""Named timing profiles for the simulated engine, each with its source.

A profile prices one engine step: the prefill chunks scheduled in it (new tokens and the
context already computed before each chunk), the sequences producing a token, the fraction
of the KV cache in use, and the number of running sequences. Step time = prefill part +
decode part, as in NVIDIA Dynamo's mocker (a step that finishes a prefill also samples that
request's first token, so it pays the decode part too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Chunk = tuple[int, int]
"""(new tokens computed in this step, tokens of the same request computed before)."""


@dataclass(frozen=True)
class TimingProfile:
    name: str
    source: str
    prefill_ms: Callable[[Sequence[Chunk], int], float]
    """(chunks, running sequences) → prefill milliseconds of the step."""
    decode_ms: Callable[[float, int], float]
    """(KV fraction in use, running sequences) → decode milliseconds of the step."""

    def step_seconds(self, chunks: Sequence[Chunk], sampling: int, kv_fraction: float,
                     running: int) -> float:
        ms = self.prefill_ms(chunks, running) if chunks else 0.0
        if sampling:
            ms += self.decode_ms(kv_fraction, running)
        return ms / 1000.0


def _dynamo_prefill(chunks: Sequence[Chunk], running: int) -> float:
    t = sum(new for new, _ in chunks)
    return 4.209989e-07 * t * t + 1.518344e-02 * t + 1.650142e01 if t else 0.0


def _dynamo_decode(p: float, running: int) -> float:
    return max(1.0, -25.74 * p * p + 54.01 * p + 5.74)


def _preble_prefill(chunks: Sequence[Chunk], running: int) -> float:
    return sum(28.93 + 0.1822 * new + 0.004004 * ctx + 2.55e-6 * new * ctx
               for new, ctx in chunks)


def _llmd_factor(running: int, max_seqs: int = 16, factor: float = 2.0) -> float:
    return 1.0 + (factor - 1.0) * max(running - 1, 0) / (max_seqs - 1)


def _llmd_prefill(chunks: Sequence[Chunk], running: int) -> float:
    f = _llmd_factor(running)
    return sum(30.0 * f + 0.25 * f * new for new, _ in chunks)


def _llmd_decode(p: float, running: int) -> float:
    return 12.0 * _llmd_factor(running)


PROFILES: dict[str, TimingProfile] = {
    p.name: p
    for p in (
        TimingProfile(
            "dynamo-mocker",
            "NVIDIA Dynamo mocker polynomial fit: prefill_ms = 4.21e-7·T² + 1.518e-2·T + 16.5 "
            "(T = new tokens in the step); ITL_ms = max(1, −25.74·p² + 54.01·p + 5.74), "
            "p = KV fraction in use",
            _dynamo_prefill, _dynamo_decode,
        ),
        TimingProfile(
            "preble-llama3-70b-h100",
            "Preble (ICLR'25) fit for Llama-3-70B on H100: prefill_ms = 28.93 + 0.1822·new + "
            "0.004004·context + 2.55e-6·new·context per request; decode as dynamo-mocker",
            _preble_prefill, _dynamo_decode,
        ),
        TimingProfile(
            "llmd-sim-8b-h100",
            "llm-d inference-sim 8B/H100 profile: 30 ms + 0.25 ms per new token, ITL 12 ms, "
            "both scaled by 1 + (2 − 1)·(running − 1)/15 (time factor 2 at 16 sequences)",
            _llmd_prefill, _llmd_decode,
        ),
    )
}
DEFAULT_PROFILE = "dynamo-mocker"


def get_profile(name: str) -> TimingProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from {sorted(PROFILES)}") from None
