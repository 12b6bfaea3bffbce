"""The paged KV cache's bookkeeping: a pool of fixed-size blocks, each request's block table, and the
prefix cache that lets a request start from blocks another request computed.

Plain Python, no torch: the model runner turns block tables into tensors. Blocks carry reference
counts, so a block can be shared (a cached prefix, the prompt of n > 1 choices) and is released only
when its last holder lets go. A released block that was registered under its chained hash
(`block_hash.py`) stays in the pool, evictable, until an allocation needs it: the free list is one
ordered dict, front evicted first. Released blocks without a hash go to the front (worthless);
hashed ones go to the back, a request's tail block before its head, so eviction is LRU and takes
the end of a prefix before its start. Allocating pops the front (O(1)) and drops that block's hash.

Invariants (checked by tests/engine/test_block_manager.py): a block is in the free list iff its
reference count is 0; `cached[h] == b` iff `hashes[b] == h`; a block only its holder may write
(count 1) is the only kind a request writes into.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class BlockPool:
    """Fixed set of block ids with reference counts, hashes of cached blocks, and the free list."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.hashes: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: never-used, released, and cached-but-unreferenced ones."""
        return len(self._free)

    def free_blocks(self) -> list[int]:
        """The free list in eviction order (for tests and inspection)."""
        return list(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise MemoryError("no free KV blocks")
        block, _ = self._free.popitem(last=False)
        self._drop_hash(block)
        self.ref_counts[block] = 1
        return block

    def incref(self, block: int) -> None:
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} is free; it cannot be shared")
        self.ref_counts[block] += 1

    def touch(self, block: int) -> None:
        """Take a reference to a cached block, reviving it from the free list if unreferenced."""
        if self.hashes[block] is None:
            raise ValueError(f"block {block} is not cached")
        if self.ref_counts[block] == 0:
            del self._free[block]
        self.ref_counts[block] += 1

    def decref(self, block: int) -> None:
        if self.ref_counts[block] <= 0:
            raise ValueError(f"double free of block {block}")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self._free[block] = None
            if self.hashes[block] is None:
                self._free.move_to_end(block, last=False)

    def register(self, block: int, block_hash: bytes) -> bool:
        """Cache `block` under `block_hash`; False (nothing changes) if that hash already names a
        block, as when two requests computed the same prefix at once."""
        if block_hash in self.cached or self.hashes[block] is not None:
            return False
        self.cached[block_hash] = block
        self.hashes[block] = block_hash
        return True

    def evict(self, max_blocks: int) -> int:
        """Drop the hashes of up to `max_blocks` unreferenced cached blocks, in eviction order;
        returns how many. (Allocation evicts on its own; this empties the cache on request.)"""
        n = 0
        for block in list(self._free):
            if n == max_blocks:
                break
            if self.hashes[block] is not None:
                self._drop_hash(block)
                self._free.move_to_end(block, last=False)
                n += 1
        return n

    def _drop_hash(self, block: int) -> None:
        h = self.hashes[block]
        if h is not None:
            del self.cached[h]
            self.hashes[block] = None


class BlockManager:
    """Block tables per request id, grown as tokens are scheduled; the prefix cache on top.

    A request's full blocks are registered (`cache_full_blocks`) once their tokens are computed; a
    new request asks `cached_prefix` for the blocks of its longest cached prefix and is `admit`ted
    with them, so it starts with that many tokens computed."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True):
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks)
        self.tables: dict[str, list[int]] = {}
        self._num_registered: dict[str, int] = {}  # leading blocks of a table already offered to the cache

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, request_id: str, num_tokens: int) -> int:
        """Blocks to allocate so that `request_id` holds `num_tokens` tokens."""
        held = len(self.tables.get(request_id, ()))
        return max(0, self.blocks_for(num_tokens) - held)

    def can_hold(self, request_id: str, num_tokens: int) -> bool:
        return self.num_new_blocks(request_id, num_tokens) <= self.pool.num_free

    def grow(self, request_id: str, num_tokens: int) -> None:
        """Make the table cover `num_tokens` tokens (all or nothing)."""
        need = self.num_new_blocks(request_id, num_tokens)
        if need > self.pool.num_free:
            raise MemoryError(f"{request_id}: needs {need} blocks, {self.pool.num_free} free")
        table = self.tables.setdefault(request_id, [])
        self._num_registered.setdefault(request_id, 0)
        table.extend(self.pool.allocate() for _ in range(need))

    def shrink(self, request_id: str, num_tokens: int) -> None:
        """Keep only the blocks covering the first `num_tokens` tokens (rejected speculative
        tokens' blocks, which nothing else references, go back to the pool)."""
        table = self.tables.get(request_id, [])
        keep = self.blocks_for(num_tokens)
        while len(table) > keep:
            self.pool.decref(table.pop())
        if request_id in self._num_registered:
            self._num_registered[request_id] = min(self._num_registered[request_id], keep)

    # --- the prefix cache -------------------------------------------------------------------------

    def cached_prefix(self, block_hashes: Sequence[bytes], num_tokens: int) -> list[int]:
        """Blocks of the longest cached prefix of a request of `num_tokens` tokens whose full blocks
        are named `block_hashes`: at most num_tokens - 1 tokens, so its last token is computed (its
        logits are needed). Takes no reference; `admit` does."""
        if not self.enable_caching:
            return []
        cached, out = self.pool.cached, []
        for h in block_hashes[:(num_tokens - 1) // self.block_size]:
            b = cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def can_admit(self, request_id: str, prefix: Sequence[int], num_tokens: int) -> bool:
        """Could `request_id` (holding nothing) start from `prefix` and hold `num_tokens` tokens?
        Unreferenced prefix blocks count as free until revived, so they are charged here."""
        revived = sum(1 for b in prefix if self.pool.ref_counts[b] == 0)
        return self.blocks_for(num_tokens) - len(prefix) + revived <= self.pool.num_free

    def admit(self, request_id: str, prefix: Sequence[int], num_tokens: int) -> None:
        """Start `request_id` from the cached blocks `prefix` and grow it to `num_tokens` tokens
        (all or nothing)."""
        if self.tables.get(request_id):
            raise ValueError(f"{request_id} already holds blocks")
        if not self.can_admit(request_id, prefix, num_tokens):
            raise MemoryError(f"{request_id}: {num_tokens} tokens do not fit beside {len(prefix)} cached blocks")
        for b in prefix:
            self.pool.touch(b)
        self.tables[request_id] = list(prefix)
        self._num_registered[request_id] = len(prefix)
        self.grow(request_id, num_tokens)

    def has_uncached_blocks(self, request_id: str, num_computed_tokens: int) -> bool:
        """Has `request_id` computed a full block it has not offered to the cache yet? O(1), so a
        step whose requests filled no block (most decode steps) costs no hashing and no table walk."""
        return self.enable_caching and num_computed_tokens // self.block_size > self._num_registered.get(request_id, 0)

    def cache_full_blocks(self, request_id: str, block_hashes: Sequence[bytes], num_computed_tokens: int) -> None:
        """Offer the request's full, computed blocks to the cache (each block once)."""
        if not self.enable_caching:
            return
        table = self.tables[request_id]
        done = self._num_registered[request_id]
        full = min(num_computed_tokens // self.block_size, len(block_hashes), len(table))
        for i in range(done, full):
            self.pool.register(table[i], block_hashes[i])
        self._num_registered[request_id] = max(done, full)

    def evict(self, max_blocks: int) -> int:
        """Forget up to `max_blocks` unreferenced cached blocks (LRU first); returns how many."""
        return self.pool.evict(max_blocks)

    # --- sharing within one request (n > 1 choices) -------------------------------------------------

    def can_fork(self, num_tokens: int, grow_to: int) -> bool:
        """Could a fork of `num_tokens` tokens (see `fork`) then grow to `grow_to` tokens?"""
        return self.blocks_for(grow_to) - num_tokens // self.block_size <= self.pool.num_free

    def fork(self, parent_id: str, child_id: str, num_tokens: int) -> tuple[int, int] | None:
        """The child starts with the KV of the parent's first `num_tokens` tokens: the full blocks
        are shared, the block holding the rest is copied (copy-on-write: the parent goes on writing
        its own tokens there). Returns (source, destination) of the block copy the device must make
        before the child runs, or None when `num_tokens` ends on a block boundary."""
        if self.tables.get(child_id):
            raise ValueError(f"{child_id} already holds blocks")
        parent = self.tables[parent_id]
        full, rest = divmod(num_tokens, self.block_size)
        if self.blocks_for(num_tokens) > len(parent):
            raise ValueError(f"{parent_id} holds fewer than {num_tokens} tokens")
        if rest and not self.pool.num_free:
            raise MemoryError(f"{child_id}: no free block for the copy of a partial block")
        for b in parent[:full]:
            self.pool.incref(b)
        table = parent[:full]
        copy = None
        if rest:
            table.append(self.pool.allocate())
            copy = (parent[full], table[-1])
        self.tables[child_id] = table
        self._num_registered[child_id] = full
        return copy

    # --- release ----------------------------------------------------------------------------------

    def free(self, request_id: str) -> None:
        """Release the request's blocks, tail first (so a cached prefix is evicted from its end)."""
        self._num_registered.pop(request_id, None)
        for b in reversed(self.tables.pop(request_id, ())):
            self.pool.decref(b)

    def slot(self, request_id: str, position: int) -> int:
        table = self.tables[request_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    @property
    def usage(self) -> float:
        return 1.0 - self.pool.num_free / self.pool.num_blocks
