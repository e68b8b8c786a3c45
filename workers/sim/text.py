"""Deterministic output: the same prompt always yields the same tokens and text.

Output tokens are drawn from the tokenizer's own whole-word tokens (" word"), so the text
decodes token by token, and a client that sends it back in the next turn re-tokenizes it to
about the same ids. The choice is seeded by the prompt's hash and the token position.
"""

from __future__ import annotations

import re

import xxhash
from tokenizers import Tokenizer

_WORD = re.compile(r"^Ġ[a-z]{3,9}$")  # byte-level BPE marks a leading space with "Ġ"
_FALLBACK = [" lorem", " ipsum", " dolor", " sit", " amet"]


class OutputVocab:
    def __init__(self, tokenizer: Tokenizer | None, limit: int = 4096) -> None:
        words: list[tuple[int, str]] = []
        if tokenizer is not None:
            for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
                if _WORD.match(token):
                    words.append((token_id, " " + token[1:]))
                    if len(words) >= limit:
                        break
        if not words:
            words = [(i, w) for i, w in enumerate(_FALLBACK)]
        self._ids = [i for i, _ in words]
        self._text = [t for _, t in words]

    def token(self, seed: int, index: int) -> tuple[int, str]:
        pick = xxhash.xxh3_64_intdigest(index.to_bytes(8, "little"), seed) % len(self._ids)
        return self._ids[pick], self._text[pick]


def prompt_seed(token_bytes: bytes) -> int:
    return xxhash.xxh3_64_intdigest(token_bytes)


def natural_length(seed: int, lo: int, hi: int) -> int:
    """Where the model would stop on its own (an "end of sequence"), in [lo, hi]."""
    return lo + seed % (hi - lo + 1)
