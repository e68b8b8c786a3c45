"""Simulated engine's KV-event publisher: wire format, engine hashes, replay, model hookup."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from gateway.index.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    decode_frames,
    decode_replay_reply,
    replay_request,
    sglang_event_hash,
    sglang_page_digests,
    vllm_block_digests,
    vllm_event_hash,
)
from workers.sim.kv_events import KVEventPublisher
from workers.sim.model import EngineConfig, EngineModel, SimRequest

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "fixtures" / "vllm-0.32"
ANY_PORT = "tcp://127.0.0.1:*"
TIMEOUT_MS = 2000
BS = 4
U63 = 1 << 63


def tb(tokens: list[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}I", *tokens)


def items(tokens: list[int], ids: list[int], parent: int | None) -> list[tuple]:
    """BlockPool 'stored' items for consecutive full blocks named ``ids`` after ``parent``."""
    out = []
    for i, h in enumerate(ids):
        out.append((h, parent, tb(tokens[i * BS:(i + 1) * BS])))
        parent = h
    return out


def engine_hashes(flavor: str, tokens: list[int], salt: str | None = None) -> list[int]:
    if flavor == "vllm":
        return [vllm_event_hash(d) for d in vllm_block_digests(tokens, BS, salt=salt)]
    return [sglang_event_hash(d) for d in sglang_page_digests(tokens, BS)]


class Sockets:
    """Test-side sockets, held and closed at teardown (an unclosed one warns, i.e. fails)."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.open: list[zmq.Socket] = []

    def socket(self, kind: int) -> zmq.Socket:
        sock = self.context.socket(kind)
        self.open.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.open:
            sock.close(0)
        self.context.term()


@pytest.fixture
def ctx() -> Iterator[Sockets]:
    sockets = Sockets()
    yield sockets
    sockets.close()


def subscribe(ctx: Sockets, pub: KVEventPublisher) -> zmq.Socket:
    """A SUB that provably receives: probe the raw PUB until one probe arrives (slow joiner)."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub.endpoint)
    for _ in range(200):
        pub._pub.send_multipart([b"probe", b"", b""])
        if sub.poll(10):
            break
    else:
        pytest.fail("subscription never reached the publisher")
    while sub.poll(50):  # drain the probes
        sub.recv_multipart()
    return sub


def recv(sub: zmq.Socket) -> list[bytes]:
    assert sub.poll(TIMEOUT_MS), "no message within the timeout"
    return sub.recv_multipart()


def recv_batches(sub: zmq.Socket, topic: str, first_seq: int, n: int) -> list[EventBatch]:
    out = []
    for i in range(n):
        got_topic, seq, batch = decode_frames(recv(sub))
        assert (got_topic, seq) == (topic, first_seq + i)
        out.append(batch)
    assert not sub.poll(50), "unexpected extra message"
    return out


@pytest.fixture
def publisher(request: pytest.FixtureRequest) -> Iterator[KVEventPublisher]:
    flavor, kwargs = request.param if isinstance(request.param, tuple) else (request.param, {})
    pub = KVEventPublisher(flavor, ANY_PORT, ANY_PORT, f"kv@{flavor}", BS, **kwargs)
    yield pub
    pub.close()


# ---- hashing and event content ----

TOKENS = [7, 1, 900, 33, 40000, 2, 2, 5, 81, 9, 123456, 4, 17, 17, 17, 17, 3, 2, 1, 0]  # 5 blocks


@pytest.mark.parametrize("publisher", ["vllm", "sglang"], indirect=True)
def test_stores_chain_and_removals_name_engine_hashes(publisher, ctx) -> None:
    flavor = publisher.flavor
    sub = subscribe(ctx, publisher)
    want = engine_hashes(flavor, TOKENS)
    publisher.on_pool_event("stored", items(TOKENS[:12], [101, 102, 103], None))
    assert publisher.flush() == 0
    publisher.on_pool_event("removed", [999])  # never stored: nothing to retract
    publisher.on_pool_event("stored", items(TOKENS[12:], [104, 105], 103))
    publisher.on_pool_event("removed", [105, 101])
    assert publisher.flush() == 1
    assert publisher.flush() is None  # nothing new: no batch
    b0, b1 = recv_batches(sub, f"kv@{flavor}", 0, 2)
    assert b0.data_parallel_rank == 0 and b1.data_parallel_rank == 0
    stores = [e for e in (*b0.events, *b1.events) if isinstance(e, BlockStored)]
    assert [h for e in stores for h in e.block_hashes] == want
    assert [t for e in stores for t in e.token_ids] == TOKENS
    parents = [e.parent_block_hash for e in stores]
    if flavor == "vllm":  # one event per consecutive run
        assert [len(e.block_hashes) for e in stores] == [3, 2]
        assert parents == [None, want[2]]
        assert stores[0].extra_keys == (None, None, None)
        assert any(h >= U63 for h in want), "pick tokens that exercise uint64"
    else:  # one event per page
        assert [len(e.block_hashes) for e in stores] == [1] * 5
        assert parents == [None, *want[:4]]
        assert stores[0].extra_keys is None
        assert any(h < 0 for h in want), "pick tokens that exercise negative hashes"
    assert all(e.medium == "GPU" and e.block_size == BS for e in stores)
    removed = [e.block_hashes for e in b1.events if isinstance(e, BlockRemoved)]
    assert removed == [(want[4],), (want[0],)]
    assert isinstance(b1.events[-1], BlockRemoved)  # callback order is kept


@pytest.mark.parametrize("publisher", ["vllm"], indirect=True)
def test_a_gap_inside_one_callback_splits_the_vllm_run(publisher, ctx) -> None:
    sub = subscribe(ctx, publisher)
    publisher.on_pool_event("stored", items(TOKENS[:8], [1, 2], None))
    block_3 = (4, 3, tb(TOKENS[12:16]))  # parent 3 was stored concurrently by someone else
    publisher.on_pool_event("stored", [items(TOKENS[8:12], [3], 2)[0]])
    publisher.on_pool_event("stored", [(5, None, tb(TOKENS[:4])), block_3])
    publisher.flush()
    (batch,) = recv_batches(sub, "kv@vllm", 0, 1)
    want = engine_hashes("vllm", TOKENS[:16])
    got = [(e.block_hashes, e.parent_block_hash) for e in batch.events]
    assert got == [(tuple(want[:2]), None), ((want[2],), want[1]),
                   ((want[0],), None), ((want[3],), want[2])]


@pytest.mark.parametrize("publisher", [("vllm", {"salt_of": {11: "tenant-a"}.get})],
                         indirect=True)
def test_salt_goes_into_block_zero_only(publisher, ctx) -> None:
    sub = subscribe(ctx, publisher)
    publisher.on_pool_event("stored", items(TOKENS[:8], [11, 12], None))
    publisher.on_pool_event("stored", items(TOKENS[:8], [21, 22], None))
    publisher.on_pool_event("stored", items(TOKENS[8:12], [13], 12))
    publisher.flush()
    (batch,) = recv_batches(sub, "kv@vllm", 0, 1)
    salted, plain, more = batch.events
    want = engine_hashes("vllm", TOKENS[:12], salt="tenant-a")
    assert salted.block_hashes == tuple(want[:2]) and salted.extra_keys == (("tenant-a",), None)
    assert plain.block_hashes == tuple(engine_hashes("vllm", TOKENS[:8]))
    assert more.block_hashes == (want[2],) and more.parent_block_hash == want[1]


@pytest.mark.parametrize("publisher", ["vllm", "sglang"], indirect=True)
def test_cleared_leads_the_next_batch(publisher, ctx) -> None:
    sub = subscribe(ctx, publisher)
    publisher.on_pool_event("cleared", [])
    publisher.on_pool_event("stored", items(TOKENS[:4], [1], None))
    publisher.flush()
    (batch,) = recv_batches(sub, f"kv@{publisher.flavor}", 0, 1)
    assert isinstance(batch.events[0], AllBlocksCleared) and len(batch.events) == 2


# ---- byte-exact against real vLLM 0.32 ----


def _fixture_frames() -> list[list[bytes]]:
    if not FIXTURES.is_dir():
        pytest.skip(f"vLLM fixtures not found at {FIXTURES}")
    with (FIXTURES / "events.raw.jsonl").open() as f:
        return [[base64.b64decode(x) for x in json.loads(line)["frames_b64"]] for line in f]


def _stored_items(event: BlockStored, first_id: int) -> list[tuple]:
    n, bs = len(event.block_hashes), event.block_size
    out, parent = [], None
    for i in range(n):
        out.append((first_id + i, parent, tb(list(event.token_ids[i * bs:(i + 1) * bs]))))
        parent = first_id + i
    return out


def test_payload_bytes_match_real_vllm(ctx) -> None:
    frames = _fixture_frames()
    live = [decode_frames(f)[2] for f in frames]
    pub = KVEventPublisher("vllm", ANY_PORT, None, "kv@fixture", 32,
                           salt_of={2000: "tenant-a"}.get)
    try:
        sub = subscribe(ctx, pub)
        a, c, d2 = live[0].events[0], live[1].events[0], live[4].events[-1]
        pub.on_pool_event("stored", _stored_items(a, 1000))  # seq 0: prompt A
        pub.flush()
        pub.on_pool_event("stored", _stored_items(c, 2000))  # seq 1: A with cache_salt
        pub.flush()
        # seq 4: A's blocks tail first, then c's 17, 16, 15, then the new prompt's 23 blocks
        pub.on_pool_event("removed", [*range(1017, 999, -1), 2017, 2016, 2015])
        pub.on_pool_event("stored", _stored_items(d2, 3000))
        pub.flush()
        pub.on_pool_event("cleared", [])  # seq 20: AllBlocksCleared alone
        pub.flush()
        for want_index in (0, 1, 4, 20):
            topic, _, payload = recv(sub)
            want = frames[want_index]
            assert topic == want[0]
            # 0x93 0xcb + 8 bytes of ts differ; everything else is byte for byte vLLM's
            assert payload[:2] == want[2][:2] == b"\x93\xcb"
            assert payload[10:] == want[2][10:], f"fixture seq {want_index}"
    finally:
        pub.close()


# ---- replay ----


async def _replay(address: str, start: int) -> list[tuple[int, bytes] | None]:
    actx = zmq.asyncio.Context()
    dealer = actx.socket(zmq.DEALER)
    try:
        dealer.connect(address)
        await dealer.send_multipart(replay_request(start))
        out: list[tuple[int, bytes] | None] = []
        while True:
            frames = await asyncio.wait_for(dealer.recv_multipart(), TIMEOUT_MS / 1000)
            reply = decode_replay_reply(frames)
            assert frames[1] == (b"" if reply is None else b"kv@r")
            out.append(None if reply is None else (reply[0], frames[3]))
            if reply is None:
                return out
    finally:
        dealer.close(0)
        actx.term()


@pytest.mark.parametrize(("buffer", "start", "want"), [
    (10, 0, [0, 1, 2, 3, 4]),
    (10, 3, [3, 4]),
    (10, 5, []),
    (3, 0, [2, 3, 4]),
    (3, 4, [4]),
])
def test_replay_sends_buffered_batches_then_end_marker(ctx, buffer, start, want) -> None:
    async def scenario() -> None:
        pub = KVEventPublisher("vllm", ANY_PORT, ANY_PORT, "kv@r", BS, buffer)
        try:
            pub.start()
            sub = subscribe(ctx, pub)
            for i in range(5):
                pub.on_pool_event("stored", items(TOKENS[i * 4:i * 4 + 4], [i + 1], None))
                assert pub.flush() == i
            live = {decode_frames(f := recv(sub))[1]: f[2] for _ in range(5)}
            replies = await _replay(pub.replay_address, start)
            assert replies[-1] is None
            assert [seq for seq, _ in replies[:-1]] == want
            assert all(live[seq] == payload for seq, payload in replies[:-1])
            # the ROUTER keeps serving: a second request works too
            assert (await _replay(pub.replay_address, 4))[0] == (4, live[4])
        finally:
            await pub.aclose()

    asyncio.run(scenario())


# ---- hooked to the real simulated engine ----


def _drive(model: EngineModel, pub: KVEventPublisher, prompts: list[list[int]],
           salt: str | None = None, salts: dict[int, str] | None = None) -> None:
    for i, tokens in enumerate(prompts):
        request = SimRequest(f"r{i}", tb(tokens), 2, 0.0, salt)
        model.add(request)
        if salt is not None and salts is not None and request.hashes:
            salts[request.hashes[0]] = salt
        now = 0.0
        while model.has_work:
            result = model.step(now)
            assert result is not None
            now += result.duration
            pub.flush()


def _check_stream(batches: list[EventBatch]) -> tuple[list[int], int]:
    """Every parent and removal refers to a live stored hash; returns stores, removals."""
    live: set[int] = set()
    stored: list[int] = []
    removals = 0
    for batch in batches:
        for event in batch.events:
            if isinstance(event, BlockStored):
                parent = event.parent_block_hash
                assert parent is None or parent in live
                assert live.isdisjoint(event.block_hashes), "stored twice without removal"
                assert len(event.token_ids) == len(event.block_hashes) * BS
                live.update(event.block_hashes)
                stored.extend(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                assert set(event.block_hashes) <= live
                live.difference_update(event.block_hashes)
                removals += 1
    return stored, removals


P1 = list(range(1, 13))  # 3 full blocks
P2 = [*P1[:8], 50, 51, 52, 53, 54]  # shares 2 blocks with P1, adds 1
P3 = list(range(100, 121))  # 5 full blocks: evicts from the 8-block pool


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_engine_model_stream_is_consistent(ctx, flavor) -> None:
    salts: dict[int, str] = {}
    pub = KVEventPublisher(flavor, ANY_PORT, None, "kv@sim", BS, salt_of=salts.get)
    try:
        sub = subscribe(ctx, pub)
        model = EngineModel(EngineConfig(num_blocks=8, block_size=BS),
                            listener=pub.on_pool_event)
        _drive(model, pub, [P1, P2, P3, P1])
        if flavor == "vllm":
            _drive(model, pub, [P1], salt="t", salts=salts)
        batches = recv_batches(sub, "kv@sim", 0, pub.next_seq)
    finally:
        pub.close()
    stored, removals = _check_stream(batches)
    assert removals > 0, "the small pool must evict"
    p1 = engine_hashes(flavor, P1)
    want = {*p1, engine_hashes(flavor, P2)[2], *engine_hashes(flavor, P3)}
    if flavor == "vllm":
        want |= set(engine_hashes(flavor, P1, salt="t"))
    assert set(stored) == want
    assert len(stored) > len(set(stored)), "P1's evicted blocks are announced again"
    p2_event = next(e for b in batches for e in b.events
                    if isinstance(e, BlockStored) and e.token_ids[:1] == (50,))
    assert p2_event.parent_block_hash == p1[1]
