"""ChatTokenizer: chat → the engine's exact prompt token ids, cheaply and off the event loop.

Chat templates put special tokens at message boundaries, and a tokenizer splits its input
at added tokens before anything else, so the rendered prompt can be cut at those tokens and
each piece encoded on its own: concatenating the pieces' ids gives exactly the full encode.
Pieces are cached (LRU by size): a long system prompt or an earlier turn is tokenized once,
not on every request. A self-check at load time compares piece-wise and full encodes and
falls back to full encodes for a tokenizer where they differ (e.g. a Metaspace
pre-tokenizer that treats each piece as the start of the text).

Token ids travel as ``bytes`` of uint32 little-endian: concatenation is a ``memcpy`` and
block keys hash them without conversion. HF ``tokenizers`` releases the GIL only in
``encode_batch``, so large misses are encoded there, in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from gateway.chat_template import ChatInputError, ChatTemplate

log = logging.getLogger(__name__)

TokenBytes = bytes
"""Token ids as uint32 little-endian bytes."""

_SELF_CHECK = [
    [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
     {"role": "user", "content": "  Hello,\n world! 1234 ünïcödé <not a token>  "}],
    [{"role": "user", "content": "Line one\n\n\tindented\r\nspaces   end "},
     {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nSure."},
     {"role": "user", "content": "next"}],
]


def ids_to_bytes(ids: Sequence[int]) -> TokenBytes:
    return array("I", ids).tobytes()


def bytes_to_ids(data: TokenBytes) -> list[int]:
    return array("I", data).tolist()


class _PieceCache:
    """LRU of text piece → token bytes, bounded by the bytes it holds."""

    def __init__(self, max_bytes: int) -> None:
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._max = max_bytes
        self.hits = 0
        self.misses = 0

    def get(self, piece: str) -> bytes | None:
        found = self._items.get(piece)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(piece)
        return found

    def put(self, piece: str, ids: bytes) -> None:
        cost = len(piece) + len(ids) + 100
        if cost > self._max // 4 or piece in self._items:
            return
        self._items[piece] = ids
        self._size += cost
        while self._size > self._max:
            old, old_ids = self._items.popitem(last=False)
            self._size -= len(old) + len(old_ids) + 100


class ChatTokenizer:
    """The model's chat template + HF tokenizer, with a piece cache and async encodes."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate | None, *,
                 cache_bytes: int = 256 << 20, offload_chars: int = 4096,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self._tok = tokenizer
        self.template = template
        self._cache = _PieceCache(cache_bytes)
        self._offload_chars = offload_chars
        self._executor = executor or ThreadPoolExecutor(2, thread_name_prefix="tokenize")
        self._special_ids, self._splitter = self._build_splitter(tokenizer)
        self._wrap = self._post_processor_wrap(tokenizer)
        self.piecewise = self._splitter is not None and self._self_check()

    @classmethod
    def from_dir(cls, directory: str | Path, **kwargs: Any) -> ChatTokenizer:
        directory = Path(directory)
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        try:
            template = ChatTemplate.from_dir(directory)
        except (FileNotFoundError, ValueError):
            template = None
        return cls(tokenizer, template, **kwargs)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- encoding ----------------------------------------------------------------------
    def encode(self, text: str) -> TokenBytes:
        """Synchronous encode (no special tokens added), piece-cached when safe."""
        if not self.piecewise:
            return self._encode_pieces([text])[text]
        pieces, found, missing = self._lookup(text)
        if missing:
            found.update(self._encode_pieces(missing))
        return self._assemble(pieces, found)

    def _lookup(self, text: str) -> tuple[list[str], dict[str, bytes], list[str]]:
        """Split at added tokens; find each text piece in the cache or list it as missing."""
        pieces = self._splitter.split(text)  # odd positions: the added tokens themselves
        found: dict[str, bytes] = {"": b""}
        missing: dict[str, None] = {}
        for piece in pieces[0::2]:
            if piece not in found:
                ids = self._cache.get(piece)
                if ids is None:
                    missing[piece] = None
                else:
                    found[piece] = ids
        return pieces, found, list(missing)

    def _tokenize(self, texts: list[str]) -> dict[str, bytes]:
        """Encode pieces; touches no shared state, so it may run in a worker thread (the
        GIL is released while ``encode_batch`` works)."""
        encoded = self._tok.encode_batch(texts, add_special_tokens=False)
        return {t: ids_to_bytes(e.ids) for t, e in zip(texts, encoded, strict=True)}

    def _encode_pieces(self, texts: list[str]) -> dict[str, bytes]:
        """Encode uncached pieces and remember them (on the caller's thread)."""
        fresh = self._tokenize(texts)
        for piece, ids in fresh.items():
            self._cache.put(piece, ids)
        return fresh

    def _assemble(self, pieces: list[str], found: dict[str, bytes]) -> TokenBytes:
        special = self._special_ids
        return b"".join(special[p] if i % 2 else found[p] for i, p in enumerate(pieces))

    async def encode_async(self, text: str, add_special_tokens: bool = False) -> TokenBytes:
        """Encode without stalling the event loop: only the uncached part of the text is
        tokenized, in a worker thread when it is large."""
        prefix, suffix = self._wrap if add_special_tokens else (b"", b"")
        if not self.piecewise:
            pieces, found, missing = [text], {}, [text]
        else:
            pieces, found, missing = self._lookup(text)
        if sum(map(len, missing)) > self._offload_chars:
            loop = asyncio.get_running_loop()
            fresh = await loop.run_in_executor(self._executor, self._tokenize, missing)
            for piece, ids in fresh.items():  # the cache is only touched on the loop
                self._cache.put(piece, ids)
            found.update(fresh)
        elif missing:
            found.update(self._encode_pieces(missing))
        body = self._assemble(pieces, found) if self.piecewise else found[text]
        return prefix + body + suffix

    def render(self, messages: list[dict], **kwargs: Any) -> str:
        if self.template is None:
            raise ChatInputError("this model's tokenizer has no chat template: use "
                                 "/v1/completions", "messages")
        return self.template.render(messages, **kwargs)

    async def encode_chat(self, messages: list[dict], **kwargs: Any) -> TokenBytes:
        """Render normalised ``messages`` (inline: rendering is cheap string assembly) and
        encode them; only uncached pieces are tokenized."""
        return await self.encode_async(self.render(messages, **kwargs))

    def cache_stats(self) -> tuple[int, int]:
        return self._cache.hits, self._cache.misses

    # -- set-up ------------------------------------------------------------------------
    @staticmethod
    def _build_splitter(tok: Tokenizer) -> tuple[dict[str, bytes], re.Pattern | None]:
        """Split pattern over added tokens that match literally (no strip/word rules)."""
        plain = {}
        for token_id, added in tok.get_added_tokens_decoder().items():
            if added.lstrip or added.rstrip or added.single_word or added.normalized:
                continue
            plain[added.content] = ids_to_bytes([token_id])
        if not plain:
            return {}, None
        alternation = "|".join(re.escape(t) for t in sorted(plain, key=len, reverse=True))
        return plain, re.compile(f"({alternation})")

    @staticmethod
    def _post_processor_wrap(tok: Tokenizer) -> tuple[bytes, bytes]:
        """The ids a post-processor adds around a single text (e.g. BOS), as bytes."""
        bare = tok.encode("a", add_special_tokens=False).ids
        full = tok.encode("a", add_special_tokens=True).ids
        at = next((i for i in range(len(full)) if full[i:i + len(bare)] == bare), 0)
        return ids_to_bytes(full[:at]), ids_to_bytes(full[at + len(bare):])

    def _self_check(self) -> bool:
        texts = ["plain text, no specials", *(t for t in self._special_ids)]
        if self.template is not None:
            for chat in _SELF_CHECK:
                try:
                    texts.append(self.template.render(chat, add_generation_prompt=True))
                except ValueError:
                    continue
        joined = " x ".join(texts)
        texts.append(joined)
        self.piecewise = True
        for text in texts:
            full = ids_to_bytes(self._tok.encode(text, add_special_tokens=False).ids)
            if self.encode(text) != full:
                log.warning("piece-wise tokenization differs from full encodes for this "
                            "tokenizer; caching pieces is off")
                self._cache = _PieceCache(self._cache._max)
                return False
        return True

