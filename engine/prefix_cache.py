"""Where a waiting request starts: the scheduler's side of the prefix cache and of n > 1 sharing.

A request admitted from the waiting queue starts with `num_computed_tokens` at the longest prefix
it need not compute: blocks another request computed and cached (found by chained hash), or, for
the 2nd..nth choice of one prompt, its first choice's prompt KV (shared, the partial last block
copied). Such a "follower" is parked until its leader has computed the prompt, so the n choices
compute it once; it goes to the queue when the prompt is done, or when the leader is preempted or
ends (then the cache serves it). It counts the cache's queries and hits (tokens, at a request's
first admission). Plain Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from llmop.engine.block_hash import BlockHasher
from llmop.engine.block_manager import BlockManager
from llmop.engine.request import Request, RequestStatus


@dataclass(frozen=True)
class Start:
    """How a waiting request starts: `num_tokens` tokens it does not compute, held in the cached
    blocks `prefix`, or shared from `leader`'s blocks (`fork`)."""

    num_tokens: int = 0
    prefix: tuple[int, ...] = ()
    leader: Request | None = None


class PrefixCache:
    """`hasher` None: caching is off (n > 1 choices still share their prompt)."""

    def __init__(self, blocks: BlockManager, hasher: BlockHasher | None):
        if hasher is not None and hasher.block_size != blocks.block_size:
            raise ValueError("the hasher's block size differs from the KV cache's")
        self.blocks = blocks
        self.hasher = hasher if blocks.enable_caching else None
        self.queries = 0  # prompt tokens of requests at their first admission
        self.hits = 0  # of those, tokens not computed (cached or shared)
        self._parked: dict[str, list[Request]] = {}  # leader id -> followers waiting for its prompt

    # --- n > 1: followers wait for their leader's prompt ----------------------------------------

    def park(self, req: Request) -> bool:
        """Hold `req` back while its leader still computes the shared prompt."""
        leader = req.prompt_leader
        if leader is None or leader.status not in (RequestStatus.WAITING, RequestStatus.RUNNING):
            return False
        if leader.num_computed_tokens >= leader.num_prompt_tokens:
            return False
        self._parked.setdefault(leader.request_id, []).append(req)
        return True

    def release(self, leader: Request) -> list[Request]:
        """Followers of `leader` that may now be queued."""
        return self._parked.pop(leader.request_id, [])

    def unpark(self, req: Request) -> bool:
        leader = req.prompt_leader
        followers = self._parked.get(leader.request_id, []) if leader is not None else []
        if req not in followers:
            return False
        followers.remove(req)
        if not followers:
            del self._parked[leader.request_id]
        return True

    def parked(self) -> Iterator[Request]:
        return (r for rs in self._parked.values() for r in rs)

    @property
    def num_parked(self) -> int:
        return sum(len(rs) for rs in self._parked.values())

    # --- admission ----------------------------------------------------------------------------------

    def block_hashes(self, req: Request) -> list[bytes]:
        """The names of the request's full blocks (computed once per block, kept on the request)."""
        hashes, bs = req.block_hashes, self.hasher.block_size
        full = req.num_tokens // bs
        if len(hashes) < full:
            root = (self.hasher.root(req.adapter, req.cache_salt, req.adapter_generation)
                    if not hashes else b"")
            self.hasher.extend(hashes, root, req.token_slice(len(hashes) * bs, full * bs))
        return hashes

    def find(self, req: Request) -> Start:
        """The longest prefix a waiting request (holding no blocks) need not compute."""
        prefix = self.blocks.cached_prefix(self.block_hashes(req), req.num_tokens) if self.hasher else []
        cached = Start(len(prefix) * self.blocks.block_size, tuple(prefix))
        leader = req.prompt_leader
        if (leader is not None and leader.status is RequestStatus.RUNNING
                and leader.num_computed_tokens >= req.num_prompt_tokens
                and req.num_prompt_tokens - 1 > cached.num_tokens):
            return Start(req.num_prompt_tokens - 1, leader=leader)
        return cached

    def can_start(self, req: Request, start: Start, num_tokens: int) -> bool:
        """Would `req` fit, starting at `start` and holding `num_tokens` tokens?"""
        if start.leader is not None:
            return self.blocks.can_fork(start.num_tokens, num_tokens)
        return self.blocks.can_admit(req.request_id, start.prefix, num_tokens)

    def start(self, req: Request, start: Start, num_tokens: int) -> tuple[int, int] | None:
        """Give `req` its blocks for `num_tokens` tokens and set its counter at the start; returns the
        block copy (source, destination) the device must make first, if any."""
        copy = None
        if start.leader is not None:
            copy = self.blocks.fork(start.leader.request_id, req.request_id, start.num_tokens)
            self.blocks.grow(req.request_id, num_tokens)
        else:
            self.blocks.admit(req.request_id, start.prefix, num_tokens)
        req.num_computed_tokens = start.num_tokens
        if req.times.first_scheduled is None:
            req.num_cached_tokens = start.num_tokens
            self.queries += req.num_tokens
            self.hits += start.num_tokens
        return copy

    def computed(self, req: Request) -> list[Request]:
        """After a step advanced `req`: cache its newly full blocks; returns the followers its
        now-computed prompt releases."""
        if self.hasher is not None and self.blocks.has_uncached_blocks(req.request_id, req.num_computed_tokens):
            self.blocks.cache_full_blocks(req.request_id, self.block_hashes(req), req.num_computed_tokens)
        if req.num_computed_tokens >= req.num_prompt_tokens and req.request_id in self._parked:
            return self.release(req)
        return []
