"""KV-event wire layer: real vLLM 0.32 fixtures, the old array form, and engine hashing."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import cbor2
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.index.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    EventDecodeError,
    decode_frames,
    decode_payload,
    decode_replay_reply,
    replay_request,
    sglang_event_hash,
    sglang_page_digests,
    vllm_block_digests,
    vllm_event_hash,
    vllm_none_hash,
)

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "fixtures" / "vllm-0.32"
U64 = 1 << 64
TOPIC = "kv@fixture"


def _jsonl(name: str) -> list[dict[str, Any]]:
    with (FIXTURES / name).open() as f:
        return [json.loads(line) for line in f]


def _frames(record: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(f) for f in record["frames_b64"]]


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


@pytest.fixture(scope="module")
def live() -> list[tuple[str, int, EventBatch]]:
    if not FIXTURES.is_dir():
        pytest.skip(f"vLLM fixtures not found at {FIXTURES}")
    return [decode_frames(_frames(r)) for r in _jsonl("events.raw.jsonl")]


@pytest.fixture(scope="module")
def decoded() -> list[dict[str, Any]]:
    if not FIXTURES.is_dir():
        pytest.skip(f"vLLM fixtures not found at {FIXTURES}")
    return _jsonl("events.decoded.jsonl")


# ---- real vLLM 0.32 messages ----


def _assert_event_matches(got: object, want: dict[str, Any]) -> None:
    assert type(got).__name__ == want["type"]
    if isinstance(got, BlockStored):
        assert got.block_hashes == tuple(want["block_hashes"])
        assert got.parent_block_hash == want["parent_block_hash"]
        assert got.token_ids == tuple(want["token_ids"])
        assert got.block_size == want["block_size"]
        assert got.lora_id == want["lora_id"]
        assert got.lora_name == want["lora_name"]
        assert got.medium == want["medium"] == "GPU"
        assert got.extra_keys == _freeze(want["extra_keys"])
        assert len(got.token_ids) == len(got.block_hashes) * got.block_size
    elif isinstance(got, BlockRemoved):
        assert got.block_hashes == tuple(want["block_hashes"])
        assert got.medium == want["medium"]


def test_live_messages_decode_like_the_generic_decode(live, decoded) -> None:
    assert [seq for _, seq, _ in live] == list(range(22))
    assert {topic for topic, _, _ in live} == {TOPIC}
    for (_, seq, batch), want in zip(live, decoded, strict=True):
        ts, events, rank = want["payload"]
        assert want["seq"] == seq
        assert (batch.ts, batch.data_parallel_rank) == (ts, rank)
        assert len(batch.events) == len(events), f"seq {seq}"
        for got, ev in zip(batch.events, events, strict=True):
            _assert_event_matches(got, ev)


def test_live_fixture_facts(live) -> None:
    kinds = [type(e).__name__ for _, _, b in live for e in b.events]
    assert (kinds.count("BlockStored"), kinds.count("BlockRemoved")) == (16, 86)
    assert kinds.count("AllBlocksCleared") == 2
    hashes = [
        h
        for _, _, b in live
        for e in b.events
        if not isinstance(e, AllBlocksCleared)
        for h in e.block_hashes
    ]
    assert len(hashes) == 288
    assert sum(h >= 1 << 63 for h in hashes) == 155  # uint64 on the wire, not int64
    assert all(0 <= h < U64 for h in hashes)
    assert live[18][2].events[0] == AllBlocksCleared()  # deferred reset leads the batch
    assert live[20][2].events == (AllBlocksCleared(),)
    assert live[0][2].events[0].block_hashes[0] == 14813940635187466689


def _salt_of(event: BlockStored) -> str | None:
    """Events carry the salt untagged on block 0 (``[["tenant-a"], None, ...]``)."""
    if not event.extra_keys or event.extra_keys[0] is None:
        return None
    assert all(k is None for k in event.extra_keys[1:])
    (salt,) = event.extra_keys[0]
    return salt


def test_every_stored_hash_recomputes_from_token_ids(live) -> None:
    full: dict[int, bytes] = {}  # event int -> full digest, to follow parent links
    matched = salted = chained = 0
    for _, _, batch in live:
        for e in batch.events:
            if not isinstance(e, BlockStored):
                continue
            parent = None if e.parent_block_hash is None else full[e.parent_block_hash]
            salt = _salt_of(e)
            digests = vllm_block_digests(e.token_ids, e.block_size, salt=salt, parent=parent)
            assert [vllm_event_hash(d) for d in digests] == list(e.block_hashes)
            full.update(zip(e.block_hashes, digests, strict=True))
            matched += len(digests)
            salted += salt is not None
            chained += parent is not None
    assert (matched, salted, chained) == (202, 1, 6)


def test_vllm_worked_example(live) -> None:
    assert vllm_none_hash().hex().startswith("9bd96a48")
    assert vllm_none_hash().hex().endswith("81eef0")
    first = live[0][2].events[0]
    digest = vllm_block_digests(first.token_ids[: first.block_size], first.block_size)[0]
    assert digest.hex().startswith("f0f2e415") and digest.hex().endswith("2412d1c1")
    assert vllm_event_hash(digest) == 0xCD95B0852412D1C1 == first.block_hashes[0]


def test_replay_exchange(live) -> None:
    lines = _jsonl("replay.raw.jsonl")
    assert _frames(lines[0]) == replay_request(0)
    replies = [decode_replay_reply(_frames(r)) for r in lines[1:]]
    assert replies[-1] is None
    assert replies[:-1] == [(seq, batch) for _, seq, batch in live]


# ---- encodings the fixtures do not cover ----

TOKENS = list(range(100, 108))
D0 = hashlib.sha256(b"block0").digest()


def _payload(*events: Any, rank: Any = 0, ts: Any = 1.5) -> bytes:
    batch = [ts, list(events)] if rank is ... else [ts, list(events), rank]
    return msgspec.msgpack.encode(batch)


ARRAY_AND_MAP_CASES = [
    pytest.param(
        ["BlockStored", [1, U64 - 1], None, TOKENS, 4],
        BlockStored((1, U64 - 1), None, tuple(TOKENS), 4),
        id="array-stored-first-5",
    ),
    pytest.param(
        ["BlockStored", [5], 1 << 63, TOKENS[:4], 4, 7, "CPU"],
        BlockStored((5,), 1 << 63, tuple(TOKENS[:4]), 4, lora_id=7, medium="CPU"),
        id="array-stored-lora-medium",
    ),
    pytest.param(
        ["BlockStored", [5], 3, TOKENS[:4], 4, None, "GPU", "ad", [["s"]], 0, "extra"],
        BlockStored((5,), 3, tuple(TOKENS[:4]), 4, None, "GPU", "ad", (("s",),)),
        id="array-stored-all-and-trailing",
    ),
    pytest.param(["BlockRemoved", [9, U64 - 1]], BlockRemoved((9, U64 - 1)), id="array-removed"),
    pytest.param(
        ["BlockRemoved", [9], "CPU_PINNED"],
        BlockRemoved((9,), "CPU_PINNED"),
        id="array-removed-medium",
    ),
    pytest.param(["AllBlocksCleared"], AllBlocksCleared(), id="array-cleared"),
    pytest.param(
        {
            "type": "BlockStored",
            "block_hashes": [-5, 2**63 - 1],
            "parent_block_hash": -(2**63),
            "token_ids": TOKENS,
            "block_size": 4,
            "cache_salt": "t",
            "medium": "DISK",
            "group_idx": 0,
            "future": {"nested": [1, 2]},
        },
        BlockStored((-5, 2**63 - 1), -(2**63), tuple(TOKENS), 4, medium="DISK", cache_salt="t"),
        id="map-stored-signed-unknown-keys",
    ),
    pytest.param(
        {"type": "BlockStored", "block_hashes": [D0], "token_ids": TOKENS[:4], "block_size": 4},
        BlockStored((vllm_event_hash(D0),), None, tuple(TOKENS[:4]), 4),
        id="map-stored-bytes-hash-minimal",
    ),
    pytest.param(
        {"type": "BlockRemoved", "block_hashes": [D0], "locality": "x"},
        BlockRemoved((vllm_event_hash(D0),)),
        id="map-removed-bytes",
    ),
]


@pytest.mark.parametrize(("event", "expected"), ARRAY_AND_MAP_CASES)
def test_event_forms_decode(event: Any, expected: object) -> None:
    assert decode_payload(_payload(event)) == EventBatch(1.5, (expected,), 0)


def test_missing_rank_defaults_and_unknown_events_are_skipped() -> None:
    raw = _payload({"type": "Bogus", "x": 1}, ["Bogus", 1], ["AllBlocksCleared"], rank=..., ts=7)
    assert decode_payload(raw) == EventBatch(7.0, (AllBlocksCleared(),), None)


def test_bytes_parent_matches_earlier_bytes_hash() -> None:
    d1 = hashlib.sha256(b"block1").digest()
    stored = ["BlockStored", [D0], None, TOKENS[:4], 4]
    child = {
        "type": "BlockStored",
        "block_hashes": [d1],
        "parent_block_hash": D0,
        "token_ids": TOKENS[4:],
        "block_size": 4,
    }
    first, second = decode_payload(_payload(stored, child)).events
    assert second.parent_block_hash == first.block_hashes[0] == vllm_event_hash(D0)


GARBAGE = [
    pytest.param(b"", id="empty"),
    pytest.param(b"\xc1", id="never-used-byte"),
    pytest.param(b"\x93\xcb", id="truncated"),
    pytest.param(b"\x01", id="int"),
    pytest.param(b"\x92\xcb" + b"\x00" * 8 + b"\x91\xa3\x00\x00\x80", id="bad-utf8-str"),
    pytest.param(b"\x91" * 200_000, id="deeply-nested"),
    pytest.param(_payload(["AllBlocksCleared"]) + b"\x00", id="trailing-bytes"),
    pytest.param(msgspec.msgpack.encode({"ts": 1.0}), id="map-batch"),
    pytest.param(msgspec.msgpack.encode([1.0]), id="short-batch"),
    pytest.param(msgspec.msgpack.encode(["1.0", []]), id="str-ts"),
    pytest.param(msgspec.msgpack.encode([True, []]), id="bool-ts"),
    pytest.param(msgspec.msgpack.encode([1.0, {}]), id="events-not-list"),
    pytest.param(_payload(["AllBlocksCleared"], rank="0"), id="str-rank"),
    pytest.param(_payload(42), id="event-int"),
    pytest.param(_payload([]), id="event-empty-array"),
    pytest.param(_payload({"block_hashes": [1]}), id="map-without-type"),
    pytest.param(_payload([7, [1]]), id="int-tag"),
    pytest.param(_payload(["BlockStored", [1]]), id="array-missing-fields"),
    pytest.param(_payload(["BlockStored", [1.5], None, [1], 1]), id="float-hash"),
    pytest.param(_payload(["BlockStored", [True], None, [1], 1]), id="bool-hash"),
    pytest.param(_payload(["BlockStored", [b""], None, [1], 1]), id="empty-bytes-hash"),
    pytest.param(_payload(["BlockStored", [1], "p", [1], 1]), id="str-parent"),
    pytest.param(_payload(["BlockStored", [1], None, ["a"], 1]), id="str-token"),
    pytest.param(_payload(["BlockStored", [1], None, [1], 0]), id="zero-block-size"),
    pytest.param(_payload(["BlockStored", [1], None, [1], 1, "lora"]), id="str-lora-id"),
    pytest.param(_payload(["BlockRemoved", 1]), id="hashes-not-list"),
    pytest.param(_payload(["BlockRemoved", [1], 5]), id="int-medium"),
]


@pytest.mark.parametrize("payload", GARBAGE)
def test_malformed_payloads_raise_decode_error(payload: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_payload(payload)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    with contextlib.suppress(EventDecodeError):
        assert isinstance(decode_payload(data), EventBatch)


BAD_FRAMES = [
    pytest.param([b"t", b"\x00" * 8], id="two-frames"),
    pytest.param([b"t", b"\x00" * 7, _payload()], id="short-seq"),
    pytest.param([b"\xff", b"\x00" * 8, _payload()], id="topic-not-utf8"),
]


@pytest.mark.parametrize("frames", BAD_FRAMES)
def test_bad_pub_frames(frames: list[bytes]) -> None:
    with pytest.raises(EventDecodeError):
        decode_frames(frames)


def test_pub_and_replay_framing() -> None:
    seq = (U64 - 2).to_bytes(8, "big")
    empty = EventBatch(1.5, (), 0)
    assert decode_frames([b"kv@w1", seq, _payload()]) == ("kv@w1", U64 - 2, empty)
    assert decode_replay_reply([b"", b"kv@w1", seq, _payload()]) == (U64 - 2, empty)
    assert decode_replay_reply([b"", b"", b"\xff" * 8, b""]) is None
    with pytest.raises(EventDecodeError):
        decode_replay_reply([b"x", b"kv@w1", seq, _payload()])
    with pytest.raises(EventDecodeError):
        decode_replay_reply([b"kv@w1", seq, _payload()])
    assert replay_request(258) == [b"", b"\x00" * 6 + b"\x01\x02"]
    for bad in (-1, U64):
        with pytest.raises(ValueError):
            replay_request(bad)


# ---- engine hashing helpers ----

token_lists = st.lists(st.integers(0, 2**32 - 1), max_size=24)


def test_vllm_digest_formula_salt_and_seed() -> None:
    tokens = list(range(8))
    d0, d1 = vllm_block_digests(tokens, 4)
    none = hashlib.sha256(cbor2.dumps("vllm-none-hash", canonical=True)).digest()
    assert vllm_none_hash() == none
    assert d0 == hashlib.sha256(cbor2.dumps((none, (0, 1, 2, 3), None), canonical=True)).digest()
    assert d1 == hashlib.sha256(cbor2.dumps((d0, (4, 5, 6, 7), None), canonical=True)).digest()
    s0, s1 = vllm_block_digests(tokens, 4, salt="t")
    tagged = (("cache_salt", "t"),)
    assert s0 == hashlib.sha256(cbor2.dumps((none, (0, 1, 2, 3), tagged), canonical=True)).digest()
    assert s1 == vllm_block_digests(tokens[4:], 4, parent=s0)[0] != d1
    assert vllm_block_digests(tokens, 4, seed="42")[0] != d0
    assert vllm_block_digests(tokens[:7], 4) == [d0]  # the partial block is never hashed
    assert vllm_event_hash(d0) == int.from_bytes(d0, "big") % U64


@settings(max_examples=50, deadline=None)
@given(token_lists, token_lists, st.sampled_from([None, "tenant"]))
def test_vllm_chain_continues_from_parent(a: list[int], b: list[int], salt: str | None) -> None:
    a = a[: len(a) // 4 * 4]
    whole = vllm_block_digests(a + b, 4, salt=salt)
    head = vllm_block_digests(a, 4, salt=salt)
    tail = vllm_block_digests(b, 4, salt=salt, parent=head[-1]) if head else whole
    assert whole == (head + tail if head else tail)


def test_sglang_digest_formula() -> None:
    tokens = [1, 2, 3, 2**32 - 1, 5, 6, 7, 8, 9]
    p0, p1 = sglang_page_digests(tokens, 4)
    assert p0 == hashlib.sha256(struct.pack("<4I", 1, 2, 3, 2**32 - 1)).digest()
    assert p1 == hashlib.sha256(p0 + struct.pack("<4I", 5, 6, 7, 8)).digest()
    assert sglang_page_digests(tokens[4:], 4, prefix=p0) == [p1]
    with pytest.raises(ValueError):
        sglang_page_digests([2**32], 1)
    with pytest.raises(ValueError):
        sglang_page_digests([1], 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=12, max_size=12), st.integers(0, 11))
def test_sglang_page_depends_on_every_earlier_page(tokens: list[int], pos: int) -> None:
    changed = list(tokens)
    changed[pos] = (changed[pos] + 1) % 2**32
    before, after = sglang_page_digests(tokens, 4), sglang_page_digests(changed, 4)
    page = pos // 4
    assert before[:page] == after[:page]
    assert all(x != y for x, y in zip(before[page:], after[page:], strict=True))
    assert sglang_page_digests(tokens, 4) == before  # deterministic


SIGNED_CASES = [
    (b"\x80" + b"\x00" * 31, -(2**63)),
    (b"\xff" * 8 + b"\x00" * 24, -1),
    (b"\x7f" + b"\xff" * 7 + b"\x00" * 24, 2**63 - 1),
    (b"\x00" * 7 + b"\x01" + b"\xff" * 24, 1),
]


@pytest.mark.parametrize(("digest", "expected"), SIGNED_CASES)
def test_sglang_event_hash_is_signed_first_8_bytes(digest: bytes, expected: int) -> None:
    assert sglang_event_hash(digest) == expected


def test_sglang_event_hash_of_a_real_high_digest_is_negative() -> None:
    digest = next(d for t in range(64) for d in sglang_page_digests([t], 1) if d[0] >= 0x80)
    assert sglang_event_hash(digest) == int.from_bytes(digest[:8], "big") - U64 < 0
    with pytest.raises(ValueError):
        sglang_event_hash(b"\x00" * 7)
