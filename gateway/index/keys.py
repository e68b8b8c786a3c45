"""Block keys: the index's own names for token-block prefixes.

A prompt of token ids is cut into full blocks of ``block_size`` tokens (a trailing partial
block is never cached by an engine, so it is never keyed). Block ``i`` gets the key

    key_i = XXH3_64(tokens of block i as uint32 little-endian, seed = key_{i-1})
    key_-1 = XXH3_64(b"radixgate/v1" + namespace)           (the chain's root seed)

so equal keys at equal depth mean equal token prefixes, whatever engine sits behind the
gateway. ``namespace`` carries what must never be shared across requests: the model (a
LoRA adapter) and the tenant's cache salt; it only changes the root seed, so isolation
costs nothing per block.

XXH3 is not collision resistant against an adversary. A collision here can only misroute a
request (the engine checks its own cryptographic block hashes before reusing KV), so speed
wins: one C call per block, ~0.1 µs.

Keys travel as ``bytes`` of little-endian uint64 (8 bytes a block) so the radix tree can
compare whole runs with one ``memcmp``; :func:`key_at` reads one back as an int.
"""

from __future__ import annotations

from array import array
from typing import NewType

import xxhash

BlockKey = NewType("BlockKey", int)
"""One block's chained key: an unsigned 64-bit int."""

KEY_BYTES = 8
TOKEN_BYTES = 4

_hash = xxhash.xxh3_64_intdigest


def root_seed(namespace: str = "") -> int:
    """The seed of a chain: distinct namespaces (model, tenant salt) never share a key."""
    return _hash(b"radixgate/v1\x00" + namespace.encode())


def tokens_to_bytes(token_ids: list[int] | array) -> bytes:
    """Token ids as uint32 little-endian bytes, the form keys are hashed from."""
    if isinstance(token_ids, array) and token_ids.typecode == "I":
        return token_ids.tobytes()
    return array("I", token_ids).tobytes()


def block_keys(token_bytes: bytes, block_size: int, seed: int) -> bytes:
    """Chained keys of every full block of ``token_bytes`` (uint32 LE token ids).

    Returns ``8 * n_full_blocks`` bytes. Cost: one XXH3 call per block. To continue an
    existing chain, pass its last key as ``seed``.
    """
    stride = block_size * TOKEN_BYTES
    n_blocks = len(token_bytes) // stride
    keys = array("Q", bytes(KEY_BYTES * n_blocks))
    key = seed
    pos = 0
    for i in range(n_blocks):
        key = _hash(token_bytes[pos : pos + stride], key)
        keys[i] = key
        pos += stride
    return keys.tobytes()


def key_at(keys: bytes, i: int) -> BlockKey:
    """The ``i``-th key of a key run as an int."""
    return BlockKey(int.from_bytes(keys[i * KEY_BYTES : (i + 1) * KEY_BYTES], "little"))


def num_keys(keys: bytes) -> int:
    """How many block keys a key run holds."""
    return len(keys) // KEY_BYTES
