"""Chained hashes of full KV blocks: the names under which computed blocks are found again.

Block i of a request is named `H(name of block i-1 ‖ token ids of block i)`; block 0's parent is the
request's root, `H(version ‖ adapter ‖ adapter generation ‖ cache_salt)`. So a block's name covers
every token before it and the keys that must never mix (a LoRA adapter changes every layer's KV,
and a name unloaded and loaded again may hold other weights, hence the registration's generation;
tenants that must not share pick different salts), and one dictionary lookup per block finds the
longest cached prefix.

Token ids are packed as little-endian uint32 and parents have the hash function's fixed size, so the
byte strings are unambiguous and the same on every machine. sha256 is the default: collisions are
out of reach even for a tenant who crafts prompts. xxh3_128 (the `xxhash` package, not installed by
default) is faster but not collision-resistant against an adversary; see docs/benchmarks.md.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
from typing import Callable, Sequence

HashFn = Callable[[bytes], bytes]

_VERSION = "llmop-prefix-v2"  # v2: the adapter generation joined the root
HASH_NAMES = ("sha256", "xxh3_128")


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def get_hash_fn(name: str) -> HashFn:
    """The hash function called `name` (one of HASH_NAMES)."""
    if name == "sha256":
        return _sha256
    if name == "xxh3_128":
        try:
            import xxhash
        except ImportError:
            raise ValueError("prefix_caching_hash xxh3_128 needs the xxhash package (pip install xxhash)") from None
        return xxhash.xxh3_128_digest
    raise ValueError(f"unknown prefix caching hash {name!r}; choose one of {', '.join(HASH_NAMES)}")


@dataclass(frozen=True)
class BlockHasher:
    """Names full blocks of `block_size` tokens with `hash_fn`."""

    block_size: int
    hash_fn: HashFn = _sha256
    _pack: struct.Struct = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_pack", struct.Struct(f"<{self.block_size}I"))

    def root(self, adapter: str | None = None, cache_salt: str | None = None,
             adapter_generation: int | None = None) -> bytes:
        """The parent of block 0: requests share blocks only under the same registration of the same
        adapter (`adapter_generation`, from the adapter registry) and the same salt."""
        return self.hash_fn(json.dumps([_VERSION, adapter, adapter_generation, cache_salt]).encode())

    def extend(self, hashes: list[bytes], root: bytes, tokens: Sequence[int]) -> None:
        """Append to `hashes` the names of the full blocks in `tokens`, which start at the first
        block `hashes` does not name yet (a partial block at the end is left for later)."""
        bs, pack, h = self.block_size, self._pack.pack, self.hash_fn
        parent = hashes[-1] if hashes else root
        for start in range(0, len(tokens) - bs + 1, bs):
            parent = h(parent + pack(*tokens[start:start + bs]))
            hashes.append(parent)
