"""Property test of the block bookkeeping: random admit/grow/fork/abort/finish sequences never leak,
double-free, or share a block without counting it."""

from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from llmop.engine.block_manager import BlockManager, BlockPool

NUM_BLOCKS, BLOCK_SIZE = 24, 4


class BlockMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.bm = BlockManager(NUM_BLOCKS, BLOCK_SIZE)
        self.tokens: dict[str, int] = {}
        self.next_id = 0

    @rule(n=st.integers(1, 40))
    def admit(self, n):
        rid = f"r{self.next_id}"
        self.next_id += 1
        if self.bm.can_hold(rid, n):
            self.bm.grow(rid, n)
            self.tokens[rid] = n
        else:
            with pytest.raises(MemoryError):
                self.bm.grow(rid, n)
            assert rid not in self.bm.tables or not self.bm.tables[rid]
            self.bm.tables.pop(rid, None)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), extra=st.integers(1, 9))
    def append(self, data, extra):
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        want = self.tokens[rid] + extra
        free_before = self.bm.pool.num_free
        if self.bm.can_hold(rid, want):
            self.bm.grow(rid, want)
            self.tokens[rid] = want
        else:
            with pytest.raises(MemoryError):
                self.bm.grow(rid, want)
            assert self.bm.pool.num_free == free_before  # all or nothing

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child = f"r{self.next_id}"
        self.next_id += 1
        self.bm.fork(parent, child)
        self.tokens[child] = self.tokens[parent]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def finish_or_abort(self, data):
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        self.bm.free(rid)
        del self.tokens[rid]

    @invariant()
    def counts_are_exact(self):
        holders = Counter(b for t in self.bm.tables.values() for b in t)
        pool = self.bm.pool
        for b in range(NUM_BLOCKS):
            assert pool.ref_counts[b] == holders.get(b, 0)
        assert pool.num_free == sum(1 for b in range(NUM_BLOCKS) if holders.get(b, 0) == 0)
        assert len(set(pool._free)) == len(pool._free)  # nothing freed twice
        for rid, n in self.tokens.items():
            assert len(self.bm.tables[rid]) == self.bm.blocks_for(n)

    def teardown(self):
        for rid in list(self.tokens):
            self.bm.free(rid)
        assert self.bm.pool.num_free == NUM_BLOCKS


TestBlockMachine = BlockMachine.TestCase
TestBlockMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_double_free_and_sharing_a_free_block_are_errors():
    pool = BlockPool(2)
    b = pool.allocate()
    pool.decref(b)
    with pytest.raises(ValueError):
        pool.decref(b)
    with pytest.raises(ValueError):
        pool.incref(b)


def test_slot_mapping_follows_the_block_table():
    bm = BlockManager(8, 4)
    bm.grow("x", 1)
    bm.grow("y", 9)
    bm.grow("x", 6)
    tx, ty = bm.tables["x"], bm.tables["y"]
    assert len(tx) == 2 and len(ty) == 3 and not set(tx) & set(ty)
    assert [bm.slot("x", p) for p in range(6)] == [tx[p // 4] * 4 + p % 4 for p in range(6)]
