"""KV-cache event wire layer: decode what vLLM and SGLang publish, and reproduce their hashes.

Engines publish ZMQ multipart messages ``[topic, seq (8 B big-endian), payload]``; the
payload is msgpack ``[ts, events, data_parallel_rank]`` (the rank is missing on old engines).
Each event is either a map tagged by ``"type"`` (vLLM >= 0.26, current SGLang) or a tagged
array ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
medium, lora_name, extra_keys, ...]`` (older engines; trailing fields optional). This module
only turns bytes into frozen values: no sockets, no index mutations.

Engine hashes (:data:`EngineHash`) are plain Python ints, kept exactly as the engine sent them:
vLLM sends the low 64 bits of a SHA-256 digest as an *unsigned* msgpack uint64 (about half are
>= 2^63, so never decode them as signed int64); SGLang sends the *signed* int64 of the first
8 bytes. A hash sent as ``bytes`` (vLLM with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`` sends the
full digest) becomes the unsigned big-endian int of its **last** 8 bytes: exactly the int vLLM
would have sent in int mode, so one engine hash always maps to one int and a
``parent_block_hash`` always equals the ``block_hashes`` entry of the event that stored it.
Hashes are opaque names scoped to one engine; the index keys blocks by its own token keys.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NewType, TypeGuard

import cbor2
import msgspec

EngineHash = NewType("EngineHash", int)
"""An engine's block hash as published: an int in [-2^63, 2^64)."""

VLLM_NONE_SEED = "vllm-none-hash"
"""vLLM's NONE_HASH seed when PYTHONHASHSEED is unset."""

_I64_MIN = -(1 << 63)
_U64_END = 1 << 64
_SEQ_BYTES = 8
_END_SEQ = b"\xff" * _SEQ_BYTES  # -1 as signed 8-byte big-endian: the replay end marker
_DECODER = msgspec.msgpack.Decoder()


class EventDecodeError(ValueError):
    """A message or payload that is not a well-formed KV-event batch."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Consecutive full blocks now cached; ``token_ids`` covers all of them, in order."""

    block_hashes: tuple[EngineHash, ...]
    parent_block_hash: EngineHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: tuple | None = None
    cache_salt: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks evicted from ``medium``."""

    block_hashes: tuple[EngineHash, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The engine dropped its whole prefix cache."""


Event = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    """One published batch; ``events`` keep the engine's order (removals before stores)."""

    ts: float
    events: tuple[Event, ...]
    data_parallel_rank: int | None = None


# ---- field converters: each validates one wire value and freezes it ----


def _fail(what: str, value: object) -> EventDecodeError:
    return EventDecodeError(f"{what}: unexpected {type(value).__name__}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _hash(value: object, what: str = "block hash") -> EngineHash:
    if isinstance(value, bytes) and value:
        return EngineHash(int.from_bytes(value[-8:], "big"))  # == vllm_event_hash(digest)
    if _is_int(value) and _I64_MIN <= value < _U64_END:
        return EngineHash(value)
    raise _fail(what, value)


def _hashes(value: object) -> tuple[EngineHash, ...]:
    if not isinstance(value, list):
        raise _fail("block_hashes", value)
    return tuple(_hash(v) for v in value)


def _token_ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(t) for t in value):
        raise _fail("token_ids", value)
    return tuple(value)


def _block_size(value: object) -> int:
    if _is_int(value) and value > 0:
        return value
    raise _fail("block_size", value)


def _opt_int(value: object, what: str) -> int | None:
    if value is None or _is_int(value):
        return value
    raise _fail(what, value)


def _opt_str(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _fail(what, value)


def _freeze(value: Any) -> Any:
    """Lists become tuples (recursively) so events stay hashable and immutable."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    return value


def _need(fields: Mapping[str, Any], name: str) -> Any:
    if name not in fields:
        raise EventDecodeError(f"event lacks required field {name!r}")
    return fields[name]


# ---- events: both wire forms are normalised to a field map, then built ----


def _stored(f: Mapping[str, Any]) -> BlockStored:
    parent = f.get("parent_block_hash")
    extra = f.get("extra_keys")
    return BlockStored(
        block_hashes=_hashes(_need(f, "block_hashes")),
        parent_block_hash=None if parent is None else _hash(parent, "parent_block_hash"),
        token_ids=_token_ids(_need(f, "token_ids")),
        block_size=_block_size(_need(f, "block_size")),
        lora_id=_opt_int(f.get("lora_id"), "lora_id"),
        medium=_opt_str(f.get("medium"), "medium"),
        lora_name=_opt_str(f.get("lora_name"), "lora_name"),
        extra_keys=None if extra is None else _freeze(extra),
        cache_salt=_opt_str(f.get("cache_salt"), "cache_salt"),
    )


def _removed(f: Mapping[str, Any]) -> BlockRemoved:
    return BlockRemoved(
        block_hashes=_hashes(_need(f, "block_hashes")),
        medium=_opt_str(f.get("medium"), "medium"),
    )


def _cleared(_: Mapping[str, Any]) -> AllBlocksCleared:
    return AllBlocksCleared()


_BUILDERS: dict[str, Callable[[Mapping[str, Any]], Event]] = {
    "BlockStored": _stored,
    "BlockRemoved": _removed,
    "AllBlocksCleared": _cleared,
}

# Field order of the old tagged-array form (the tag is element 0).
_POSITIONS: dict[str, tuple[str, ...]] = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
        "extra_keys",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def _fields(raw: dict[str, Any] | list[Any], tag: str) -> Mapping[str, Any]:
    """Both wire forms as one field map (positions past the known ones are dropped)."""
    return raw if isinstance(raw, dict) else dict(zip(_POSITIONS[tag], raw[1:], strict=False))


def _decode_event(raw: object) -> Event | None:
    """One event in either form, or None for a well-formed event of an unknown type."""
    if isinstance(raw, dict):
        tag = raw.get("type")
    elif isinstance(raw, list) and raw:
        tag = raw[0]
    else:
        raise _fail("event", raw)
    if not isinstance(tag, str):
        raise _fail("event type tag", tag)
    build = _BUILDERS.get(tag)
    if build is None:
        return None  # newer engine, newer event kind: not ours to interpret
    return build(_fields(raw, tag))


def decode_payload(payload: bytes) -> EventBatch:
    """Decode one msgpack batch ``[ts, events, data_parallel_rank?]``.

    Unknown event types are dropped; anything malformed raises :class:`EventDecodeError`
    (never another exception type), so a caller can skip one bad message and go on.
    """
    try:
        raw = _DECODER.decode(payload)
    except (ValueError, RecursionError) as exc:  # msgspec.DecodeError, bad UTF-8, deep nesting
        raise EventDecodeError(f"payload is not msgpack: {exc}") from exc
    if not isinstance(raw, list) or len(raw) < 2:
        raise _fail("event batch", raw)
    ts, events = raw[0], raw[1]
    if not isinstance(ts, float | int) or isinstance(ts, bool):
        raise _fail("batch ts", ts)
    if not isinstance(events, list):
        raise _fail("batch events", events)
    rank = _opt_int(raw[2] if len(raw) > 2 else None, "data_parallel_rank")
    decoded = (_decode_event(e) for e in events)
    return EventBatch(float(ts), tuple(e for e in decoded if e is not None), rank)


# ---- ZMQ framing ----


def _seq(frame: bytes) -> int:
    if len(frame) != _SEQ_BYTES:
        raise EventDecodeError(f"seq frame must be {_SEQ_BYTES} bytes, got {len(frame)}")
    return int.from_bytes(frame, "big")


def _topic(frame: bytes) -> str:
    try:
        return bytes(frame).decode()
    except UnicodeDecodeError as exc:
        raise EventDecodeError("topic is not UTF-8") from exc


def decode_frames(frames: Sequence[bytes]) -> tuple[str, int, EventBatch]:
    """A live PUB message ``[topic, seq, payload]`` as ``(topic, seq, batch)``."""
    if len(frames) != 3:
        raise EventDecodeError(f"PUB message must have 3 frames, got {len(frames)}")
    return _topic(frames[0]), _seq(frames[1]), decode_payload(frames[2])


def decode_replay_reply(frames: Sequence[bytes]) -> tuple[int, EventBatch] | None:
    """A replay reply ``[b"", topic, seq, payload]`` as ``(seq, batch)``.

    Returns None for the end marker, whose seq frame is -1 as signed 8 bytes (all 0xff).
    """
    if len(frames) != 4 or bytes(frames[0]) != b"":
        raise EventDecodeError("replay reply must be [b'', topic, seq, payload]")
    if bytes(frames[2]) == _END_SEQ:
        return None
    _topic(frames[1])
    return _seq(frames[2]), decode_payload(frames[3])


def replay_request(start_seq: int) -> list[bytes]:
    """Frames a DEALER sends to replay every buffered batch with seq >= ``start_seq``.

    The empty first frame stands in for the REQ-style delimiter the ROUTER expects;
    without it the engine ignores the request.
    """
    if not 0 <= start_seq < _U64_END:
        raise ValueError(f"start_seq out of range: {start_seq}")
    return [b"", start_seq.to_bytes(_SEQ_BYTES, "big")]


# ---- engine block hashing (to reproduce engines' hashes from token ids) ----


def _check_block_size(block_size: int) -> None:
    if block_size <= 0:
        raise ValueError(f"block size must be positive, got {block_size}")


def _sha256_cbor(obj: object) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


@lru_cache(maxsize=8)
def vllm_none_hash(seed: str = VLLM_NONE_SEED) -> bytes:
    """vLLM's chain root for ``sha256_cbor``: SHA-256 of the canonical CBOR of ``seed``.

    ``seed`` is ``$PYTHONHASHSEED`` when the engine has it set, else "vllm-none-hash".
    """
    return _sha256_cbor(seed)


def vllm_block_digests(
    token_ids: Sequence[int],
    block_size: int,
    salt: str | None = None,
    seed: str = VLLM_NONE_SEED,
    parent: bytes | None = None,
) -> list[bytes]:
    """Full 32-byte ``sha256_cbor`` digests of every full block of ``token_ids``.

    ``digest_i = SHA-256(CBOR((digest_{i-1} or NONE_HASH, tuple(block_i), extra_i)))`` with
    ``extra`` = ``(("cache_salt", salt),)`` on a request's block 0 when salted, else None.
    ``parent`` continues a chain from that block's digest; the salt then has no effect,
    because vLLM hashes it into block 0 only. A trailing partial block is never hashed.
    """
    _check_block_size(block_size)
    prev = vllm_none_hash(seed) if parent is None else parent
    extra = (("cache_salt", salt),) if salt is not None and parent is None else None
    digests: list[bytes] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = tuple(map(int, token_ids[start : start + block_size]))
        prev = _sha256_cbor((prev, block, extra))
        digests.append(prev)
        extra = None
    return digests


def vllm_event_hash(digest: bytes) -> EngineHash:
    """The int vLLM publishes for a digest: its last 8 bytes, unsigned big-endian."""
    if len(digest) < 8:
        raise ValueError("digest must have at least 8 bytes")
    return EngineHash(int.from_bytes(digest[-8:], "big"))


def sglang_page_digests(
    token_ids: Sequence[int], page_size: int, prefix: bytes = b""
) -> list[bytes]:
    """SGLang's chained page digests: ``SHA-256(prev_digest + page tokens as uint32 LE)``.

    ``prefix`` is hashed before the first page: b"" starts a fresh chain, a previous page's
    32-byte digest continues one. Only full pages are hashed.
    """
    _check_block_size(page_size)
    page_format = struct.Struct(f"<{page_size}I")
    prev = bytes(prefix)
    digests: list[bytes] = []
    for start in range(0, len(token_ids) - page_size + 1, page_size):
        try:
            page = page_format.pack(*token_ids[start : start + page_size])
        except struct.error as exc:
            raise ValueError(f"token ids must be uint32: {exc}") from exc
        prev = hashlib.sha256(prev + page).digest()
        digests.append(prev)
    return digests


def sglang_event_hash(digest: bytes) -> EngineHash:
    """The int SGLang publishes for a digest: its first 8 bytes as signed big-endian int64."""
    if len(digest) < 8:
        raise ValueError("digest must have at least 8 bytes")
    return EngineHash(int.from_bytes(digest[:8], "big", signed=True))
