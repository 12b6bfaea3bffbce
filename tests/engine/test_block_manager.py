"""Property test of the block bookkeeping and the prefix cache: random admit/compute/fork/preempt/
finish/abort/evict sequences over prompts that share prefixes never leak a block, never release or
overwrite a block someone still holds, and never return a cached block whose contents are not the
prefix its hash names (so eviction leaves no stale hash).

The test keeps a shadow of the KV cache: each slot records which sequence prefix its keys/values
were computed for, `(root, tokens[:position + 1])`. Requests write slots when they compute tokens
(only into blocks they hold alone), the fork's block copy copies slots, and every read (a prefix
hit, a running request's computed tokens) is checked against the shadow."""

from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from llmop.engine.block_hash import BlockHasher
from llmop.engine.block_manager import BlockManager, BlockPool

NUM_BLOCKS, BS = 20, 4
HASHER = BlockHasher(BS)
ROOTS = [HASHER.root(), HASHER.root(adapter="a"), HASHER.root(cache_salt="tenant-b"),
         HASHER.root(adapter="a", adapter_generation=2)]  # another registration of "a"
PREFIXES = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [5, 6, 7, 8, 20, 21, 22, 23, 24], [30, 31]]


class Seq:
    def __init__(self, tokens, root):
        self.tokens, self.root, self.hashes, self.computed = list(tokens), root, [], 0
        self.rehash()

    def rehash(self):
        start = len(self.hashes) * BS
        HASHER.extend(self.hashes, self.root, self.tokens[start:])

    def identity(self, p):
        return (self.root, tuple(self.tokens[:p + 1]))


class PrefixMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.bm = BlockManager(NUM_BLOCKS, BS)
        self.kv: dict[tuple[int, int], tuple] = {}  # (block, offset) -> what was computed there
        self.live: dict[str, Seq] = {}
        self.preempted: dict[str, Seq] = {}
        self.next_id = 0
        self.hits = 0

    def _new_id(self):
        self.next_id += 1
        return f"r{self.next_id}"

    def _compute(self, rid, seq, n):
        """The model ran n more tokens of `seq`: write their slots, then register full blocks."""
        table = self.bm.tables[rid]
        for p in range(seq.computed, seq.computed + n):
            block = table[p // BS]
            assert self.bm.pool.ref_counts[block] == 1, "a request wrote into a block it shares"
            self.kv[(block, p % BS)] = seq.identity(p)
        seq.computed += n
        if seq.computed == len(seq.tokens):  # it samples a token
            seq.tokens.append(40 + len(seq.tokens) % 3)
            seq.rehash()
        self.bm.cache_full_blocks(rid, seq.hashes, seq.computed)

    def _start(self, rid, seq, n):
        """Admit `seq` from its cached prefix, computing n tokens after the hit (if it fits)."""
        prefix = self.bm.cached_prefix(seq.hashes, len(seq.tokens))
        hit = len(prefix) * BS
        assert hit <= len(seq.tokens) - 1
        for i, b in enumerate(prefix):
            for off in range(BS):
                assert self.kv.get((b, off)) == seq.identity(i * BS + off), "a cache hit returned other KV"
        n = min(n, len(seq.tokens) - hit)
        free_before = self.bm.pool.num_free
        if not self.bm.can_admit(rid, prefix, hit + n):
            with pytest.raises(MemoryError):
                self.bm.admit(rid, prefix, hit + n)
            assert self.bm.pool.num_free == free_before and rid not in self.bm.tables
            return False
        self.bm.admit(rid, prefix, hit + n)
        self.hits += bool(prefix)
        seq.computed = hit
        self.live[rid] = seq
        self._compute(rid, seq, n)
        return True

    @rule(p=st.integers(0, len(PREFIXES) - 1), cut=st.integers(1, 12), suffix=st.lists(st.integers(50, 52), max_size=6),
          root=st.integers(0, len(ROOTS) - 1), n=st.integers(1, 20))
    def admit(self, p, cut, suffix, root, n):
        tokens = PREFIXES[p][:cut] + suffix
        if tokens:
            self._start(self._new_id(), Seq(tokens, ROOTS[root]), n)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(1, 9))
    def compute(self, data, n):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        seq = self.live[rid]
        n = min(n, len(seq.tokens) - seq.computed)
        free_before = self.bm.pool.num_free
        if self.bm.can_hold(rid, seq.computed + n):
            self.bm.grow(rid, seq.computed + n)
            self._compute(rid, seq, n)
        else:
            with pytest.raises(MemoryError):
                self.bm.grow(rid, seq.computed + n)
            assert self.bm.pool.num_free == free_before  # all or nothing

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def fork(self, data):
        """Another choice of the same prompt: shares the parent's KV of all but the last known token
        (copy-on-write for a partial block) and computes that token itself."""
        rid = data.draw(st.sampled_from(sorted(self.live)))
        parent = self.live[rid]
        if parent.computed < 1:
            return
        num = parent.computed - 1 if parent.computed < len(parent.tokens) else parent.computed
        num = min(num, len(parent.tokens) - 1)
        child = Seq(parent.tokens[:num + 1], parent.root)
        cid = self._new_id()
        if not self.bm.can_fork(num, num + 1):
            return
        copy = self.bm.fork(rid, cid, num)
        if copy is not None:  # what the device does before the child runs
            src, dst = copy
            for off in range(BS):
                self.kv[(dst, off)] = self.kv.get((src, off))
        self.bm.grow(cid, num + 1)
        child.computed = num
        self.live[cid] = child
        self._compute(cid, child, 1)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def preempt(self, data):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        self.bm.free(rid)
        self.preempted[rid] = self.live.pop(rid)

    @precondition(lambda self: self.preempted)
    @rule(data=st.data(), n=st.integers(1, 20))
    def resume(self, data, n):
        rid = data.draw(st.sampled_from(sorted(self.preempted)))
        if self._start(rid, self.preempted[rid], n):
            del self.preempted[rid]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish_or_abort(self, data):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        self.bm.free(rid)
        del self.live[rid]

    @rule(n=st.integers(1, NUM_BLOCKS))
    def evict(self, n):
        cached_free = sum(1 for b in self.bm.pool.free_blocks() if self.bm.pool.hashes[b] is not None)
        assert self.bm.evict(n) == min(n, cached_free)

    @invariant()
    def counts_are_exact(self):
        pool = self.bm.pool
        holders = Counter(b for t in self.bm.tables.values() for b in t)
        free = pool.free_blocks()
        assert len(set(free)) == len(free)
        assert set(free) == {b for b in range(NUM_BLOCKS) if holders.get(b, 0) == 0}
        for b in range(NUM_BLOCKS):
            assert pool.ref_counts[b] == holders.get(b, 0)
        assert set(self.bm.tables) == set(self.live)

    @invariant()
    def hashes_name_their_contents(self):
        pool = self.bm.pool
        assert {h: b for b, h in enumerate(pool.hashes) if h is not None} == pool.cached
        for h, b in pool.cached.items():
            root, tokens = self.kv[(b, BS - 1)]
            names = []
            HASHER.extend(names, root, list(tokens))
            assert names[-1] == h, "a cached hash names a block holding other KV"
            for off in range(BS):
                assert self.kv[(b, off)] == (root, tokens[:len(tokens) - BS + off + 1])

    @invariant()
    def running_requests_keep_their_kv(self):
        for rid, seq in self.live.items():
            table = self.bm.tables[rid]
            assert len(table) >= self.bm.blocks_for(seq.computed)
            for p in range(seq.computed):
                assert self.kv[(table[p // BS], p % BS)] == seq.identity(p)

    def teardown(self):
        for rid in list(self.live):
            self.bm.free(rid)
        assert self.bm.pool.num_free == NUM_BLOCKS


TestPrefixMachine = PrefixMachine.TestCase
TestPrefixMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


def test_double_free_and_sharing_a_free_block_are_errors():
    pool = BlockPool(2)
    b = pool.allocate()
    pool.decref(b)
    with pytest.raises(ValueError):
        pool.decref(b)
    with pytest.raises(ValueError):
        pool.incref(b)
    with pytest.raises(ValueError):
        pool.touch(b)  # not cached


def test_slot_mapping_follows_the_block_table():
    bm = BlockManager(8, 4)
    bm.grow("x", 1)
    bm.grow("y", 9)
    bm.grow("x", 6)
    tx, ty = bm.tables["x"], bm.tables["y"]
    assert len(tx) == 2 and len(ty) == 3 and not set(tx) & set(ty)
    assert [bm.slot("x", p) for p in range(6)] == [tx[p // 4] * 4 + p % 4 for p in range(6)]


def _run(bm, rid, tokens, root=ROOTS[0]):
    """Admit from the cache, compute everything, register; returns (hashes, hit blocks)."""
    hashes = []
    HASHER.extend(hashes, root, tokens)
    prefix = bm.cached_prefix(hashes, len(tokens))
    bm.admit(rid, prefix, len(tokens))
    bm.cache_full_blocks(rid, hashes, len(tokens))
    return hashes, prefix


def test_a_request_reuses_the_longest_prefix_but_computes_its_last_token():
    bm = BlockManager(16, 4)
    _run(bm, "a", list(range(12)))  # three full blocks
    bm.free("a")
    _, hit = _run(bm, "b", list(range(12)))  # the same prompt: 2 blocks, the 3rd holds the last token
    assert hit == bm.tables["b"][:2] and len(hit) == 2
    _, hit = _run(bm, "c", list(range(13)))  # one more token: all three blocks
    assert len(hit) == 3
    _, hit = _run(bm, "d", list(range(6)) + [99] * 6)  # diverges inside block 2
    assert len(hit) == 1


def test_adapters_and_salts_never_share_but_the_same_salt_does():
    bm = BlockManager(32, 4)
    tokens = list(range(9))
    _run(bm, "base", tokens)
    for i, root in enumerate(ROOTS[1:]):
        assert _run(bm, f"other{i}", tokens, root)[1] == []
    assert len(_run(bm, "same-salt", tokens, HASHER.root(cache_salt="tenant-b"))[1]) == 2


def test_eviction_is_lru_and_takes_a_request_tail_first_and_forgets_the_hash():
    bm = BlockManager(6, 4)
    ha, _ = _run(bm, "a", list(range(8)))  # blocks a0 a1
    hb, _ = _run(bm, "b", list(range(100, 108)))  # blocks b0 b1
    a0, a1 = bm.tables["a"]
    b0, b1 = bm.tables["b"]
    bm.free("a")
    bm.free("b")
    free = bm.pool.free_blocks()
    assert free[-4:] == [a1, a0, b1, b0]  # never-used blocks first, then a (older) tail first
    bm.grow("c", 12)  # 3 blocks: the 2 unused ones, then a's tail
    assert bm.pool.hashes[a1] is None and ha[1] not in bm.pool.cached
    assert bm.cached_prefix(ha, 9) == [a0]  # a's head is still cached
    assert bm.cached_prefix(hb, 9) == [b0, b1]


def test_a_hit_revives_a_cached_block_so_eviction_cannot_take_it():
    bm = BlockManager(3, 4)
    hashes, _ = _run(bm, "a", list(range(8)))
    bm.free("a")
    prefix = bm.cached_prefix(hashes, 9)
    assert not bm.can_admit("b", prefix, 13)  # 2 revived + 2 new > 3
    bm.admit("b", prefix, 12)  # 2 revived + 1 new
    assert bm.pool.num_free == 0 and bm.tables["b"][:2] == prefix


def test_fork_shares_full_blocks_and_copies_the_partial_one():
    bm = BlockManager(8, 4)
    bm.grow("p", 7)
    copy = bm.fork("p", "c", 6)
    p, c = bm.tables["p"], bm.tables["c"]
    assert c[0] == p[0] and bm.pool.ref_counts[p[0]] == 2
    assert copy == (p[1], c[1]) and c[1] != p[1]
    assert bm.fork("p", "d", 4) is None and bm.tables["d"] == [p[0]]


def test_caching_off_shares_nothing():
    bm = BlockManager(16, 4, enable_caching=False)
    hashes, _ = _run(bm, "a", list(range(12)))
    bm.free("a")
    assert bm.cached_prefix(hashes, 13) == [] and not bm.pool.cached
