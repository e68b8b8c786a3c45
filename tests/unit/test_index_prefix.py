"""PrefixIndex: properties against a plain reference model, and LRU/capacity behaviour."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.index.keys import block_keys, num_keys, root_seed, tokens_to_bytes
from gateway.index.prefix import PrefixIndex

BS = 4
SEED = root_seed("test")


def keys_of(tokens: list[int]) -> bytes:
    return block_keys(tokens_to_bytes(tokens), BS, SEED)


def blocks_of(tokens: list[int]) -> tuple[tuple[int, ...], ...]:
    n = len(tokens) // BS
    return tuple(tuple(tokens[i * BS : (i + 1) * BS]) for i in range(n))


def common_blocks(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# Prompts over a tiny alphabet so that prefixes are shared often.
prompts = st.lists(st.integers(0, 2), min_size=0, max_size=10 * BS)
ops = st.lists(st.tuples(st.integers(0, 2), prompts), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops, prompts)
def test_match_is_longest_common_block_prefix_without_eviction(ops, probe) -> None:
    index = PrefixIndex()
    for slot in range(3):
        index.add_worker(slot, capacity_blocks=10_000)
    inserted: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
    for slot, tokens in ops:
        index.insert(slot, keys_of(tokens))
        inserted[slot].append(blocks_of(tokens))
    got = index.match(keys_of(probe))
    want_probe = blocks_of(probe)
    for slot in range(3):
        want = max((common_blocks(p, want_probe) for p in inserted[slot]), default=0)
        assert got.get(slot, 0) == want


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 12))
def test_capacity_is_never_exceeded_and_holdings_stay_prefix_closed(ops, capacity) -> None:
    index = PrefixIndex()
    for slot in range(3):
        index.add_worker(slot, capacity_blocks=capacity)
    inserted: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
    for slot, tokens in ops:
        index.insert(slot, keys_of(tokens))
        inserted[slot].append(blocks_of(tokens))
        for s in range(3):
            assert index.blocks_held(s) <= capacity
    # A match never claims more than was inserted for that slot.
    for slot, tokens in ops:
        got = index.match(keys_of(tokens)).get(slot, 0)
        want = max(common_blocks(p, blocks_of(tokens)) for p in inserted[slot]) if inserted[
            slot
        ] else 0
        assert got <= want
    stats = index.stats()
    assert stats.entries == sum(stats.blocks_by_slot.values())


def test_most_recent_insert_survives_eviction() -> None:
    index = PrefixIndex()
    index.add_worker(0, capacity_blocks=4)
    a = keys_of([1] * 8)  # 2 blocks
    b = keys_of([2] * 8)
    c = keys_of([3] * 8)
    index.insert(0, a)
    index.insert(0, b)
    index.insert(0, a)  # touch a: b is now the least recently used
    index.insert(0, c)  # needs 2 blocks: b goes
    assert index.match(a) == {0: 2}
    assert index.match(b) == {}
    assert index.match(c) == {0: 2}
    assert index.blocks_held(0) == 4


def test_eviction_takes_the_tail_of_a_run_first() -> None:
    index = PrefixIndex()
    index.add_worker(0, capacity_blocks=5)
    long = keys_of(list(range(16)))  # 4 blocks
    other = keys_of([9] * 8)  # 2 blocks: one block of `long` must go, its last one
    index.insert(0, long)
    index.insert(0, other)
    assert index.match(long) == {0: 3}
    assert index.blocks_held(0) == 5


def test_shared_prefix_counts_once_per_worker_and_match_reports_every_worker() -> None:
    index = PrefixIndex()
    for slot in (0, 1, 5):
        index.add_worker(slot, capacity_blocks=100)
    system = list(range(8))  # 2 shared blocks
    index.insert(0, keys_of(system + [7] * 8))
    index.insert(1, keys_of(system + [8] * 4))
    index.insert(5, keys_of(system))
    assert index.match(keys_of(system + [7] * 8)) == {0: 4, 1: 2, 5: 2}
    assert index.match(keys_of(system + [8] * 4 + [1] * 4)) == {0: 2, 1: 3, 5: 2}
    assert index.blocks_held(0) == 4 and index.blocks_held(1) == 3


def test_clear_worker_drops_only_that_worker() -> None:
    index = PrefixIndex()
    index.add_worker(0, 100)
    index.add_worker(1, 100)
    k = keys_of(list(range(12)))
    index.insert(0, k)
    index.insert(1, k)
    assert index.clear_worker(0) == 3
    assert index.match(k) == {1: 3}
    index.remove_worker(1)
    assert index.match(k) == {}
    assert index.stats().nodes == 0 and index.stats().entries == 0


def test_global_cap_bounds_entries() -> None:
    index = PrefixIndex(max_entries=10)
    index.add_worker(0, 100)
    index.add_worker(1, 100)
    for i in range(10):
        index.insert(i % 2, keys_of([i] * 8))
    assert index.stats().entries <= 10


def test_salted_namespaces_never_share_keys() -> None:
    tokens = list(range(8))
    plain = block_keys(tokens_to_bytes(tokens), BS, root_seed(""))
    salted = block_keys(tokens_to_bytes(tokens), BS, root_seed("tenant-a"))
    assert num_keys(plain) == num_keys(salted) == 2
    assert plain[:8] != salted[:8] and plain[8:] != salted[8:]


def test_pinned_path_is_never_evicted_until_unpinned() -> None:
    index = PrefixIndex()
    index.add_worker(0, capacity_blocks=4)
    a, b, c = keys_of([1] * 8), keys_of([2] * 8), keys_of([3] * 8)
    pin = index.insert(0, a, pin=True)
    index.insert(0, b)
    index.insert(0, c)  # a is the oldest but pinned: b goes
    assert index.match(a) == {0: 2} and index.match(b) == {}
    index.unpin(pin)  # a becomes the most recently used
    index.insert(0, b)  # c is now the oldest
    assert index.match(a) == {0: 2} and index.match(c) == {}


def test_pin_follows_the_end_of_its_path_through_splits() -> None:
    index = PrefixIndex()
    index.add_worker(0, capacity_blocks=5)
    long = keys_of(list(range(16)))  # 4 blocks
    pin = index.insert(0, long, pin=True)
    index.insert(0, keys_of(list(range(8)) + [99] * 4))  # splits long's run after 2 blocks
    index.insert(0, keys_of([7] * 8))  # over capacity: only unpinned blocks may go
    assert index.match(long) == {0: 4}
    index.unpin(pin)
    index.unpin(pin)  # twice is harmless
    index.insert(0, keys_of([8] * 12))
    assert index.blocks_held(0) <= 5


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 12), st.lists(st.booleans(), min_size=40, max_size=40))
def test_pinned_prefixes_always_match_in_full(ops, capacity, pin_flags) -> None:
    index = PrefixIndex()
    for slot in range(3):
        index.add_worker(slot, capacity_blocks=capacity)
    pinned = []
    for (slot, tokens), pin in zip(ops, pin_flags, strict=False):
        handle = index.insert(slot, keys_of(tokens), pin=pin)
        if handle is not None:
            pinned.append((slot, tokens, handle))
    for slot, tokens, _ in pinned:
        assert index.match(keys_of(tokens)).get(slot, 0) == len(tokens) // BS
    for _, _, handle in pinned:
        index.unpin(handle)
    index.insert(0, keys_of([]))
    for slot in range(3):
        index.insert(slot, keys_of([5] * BS))
        assert index.blocks_held(slot) <= capacity


def test_engine_events_place_blocks_after_their_parent_and_remove_tails() -> None:
    index = PrefixIndex(locate=True)
    index.add_worker(0, 100)
    index.add_worker(1, 100)
    chain = keys_of(list(range(24)))  # 6 blocks
    assert index.insert_after(0, None, chain[:16])  # blocks 0-1
    assert index.insert_after(0, chain[8:16], chain[16:32])  # blocks 2-3 after block 1
    assert index.match(chain) == {0: 4}
    # Worker 1 reports blocks 4-5 after block 3, which it never announced: the path to
    # block 3 is known from the tree, so worker 1 holds blocks 0-5.
    assert index.insert_after(1, chain[24:32], chain[32:48])
    assert index.match(chain) == {0: 4, 1: 6}
    assert not index.insert_after(1, keys_of([9] * 4), keys_of([8] * 4))  # unknown parent
    # Worker 1 evicts block 2: blocks 2-5 are unusable there; worker 0 is untouched.
    assert index.remove_from(1, chain[16:24]) == 4
    assert index.match(chain) == {0: 4, 1: 2}
    assert index.remove_from(1, keys_of([7] * 4)) == 0  # unknown block: nothing happens
    assert index.path_to(chain[24:32]) == chain[:32]


@settings(max_examples=200, deadline=None)
@given(ops, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=10))
def test_removals_keep_every_worker_prefix_closed(ops, removals) -> None:
    index = PrefixIndex(locate=True)
    for slot in range(3):
        index.add_worker(slot, capacity_blocks=10_000)
    held = {0: [], 1: [], 2: []}
    for slot, tokens in ops:
        index.insert(slot, keys_of(tokens))
        held[slot].append(blocks_of(tokens))
    for slot, block in removals:
        for (s, tokens) in ops:
            keys = keys_of(tokens)
            if s == slot and len(keys) // 8 > block:
                index.remove_from(slot, keys[block * 8:(block + 1) * 8])
                held[slot] = [p[:block] if p[:block + 1] == blocks_of(tokens)[:block + 1]
                              else p for p in held[slot]]
                break
    for slot, tokens in ops:
        want = max((common_blocks(p, blocks_of(tokens)) for p in held[slot]), default=0)
        assert index.match(keys_of(tokens)).get(slot, 0) == want
