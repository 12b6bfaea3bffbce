"""The paged KV cache's bookkeeping: a pool of fixed-size blocks and each request's block table.

Plain Python, no torch: the model runner turns block tables into tensors. Blocks carry reference
counts so that a block can be shared (forked sequences, prefix reuse) and is freed only when its
last holder lets go.
"""

from __future__ import annotations

from collections import deque


class BlockPool:
    """Fixed set of block ids with reference counts and a free list."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise MemoryError("no free KV blocks")
        block = self._free.popleft()
        self.ref_counts[block] = 1
        return block

    def incref(self, block: int) -> None:
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} is free; it cannot be shared")
        self.ref_counts[block] += 1

    def decref(self, block: int) -> None:
        if self.ref_counts[block] <= 0:
            raise ValueError(f"double free of block {block}")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self._free.append(block)


class BlockManager:
    """Block tables per request id, grown as tokens are computed."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.tables: dict[str, list[int]] = {}

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
        table.extend(self.pool.allocate() for _ in range(need))

    def fork(self, parent_id: str, child_id: str) -> None:
        """The child shares every block of the parent (reference counted)."""
        table = list(self.tables[parent_id])
        for b in table:
            self.pool.incref(b)
        self.tables[child_id] = table

    def free(self, request_id: str) -> None:
        for b in self.tables.pop(request_id, ()):
            self.pool.decref(b)

    def slot(self, request_id: str, position: int) -> int:
        table = self.tables[request_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    @property
    def usage(self) -> float:
        return 1.0 - self.pool.num_free / self.pool.num_blocks
