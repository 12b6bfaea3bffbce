"""A draft model's proposals: a small model with the target's vocabulary, run k steps per round.

The draft is the engine's own model code: a `ModelRunner` (one rank, in the core's process, no
LoRA: the draft is the base model) with its own paged KV cache and its own `BlockManager` (one
block table per request, no prefix caching). Per request it remembers how many leading tokens
its cache holds (`valid`). A round, batched over the requests chosen for speculation:

- step 0 catches up: it computes the tokens the draft has not seen (the whole prompt the first
  time, then the last round's accepted and bonus tokens; at least the last token, whose logits
  give the first proposal);
- steps 1..k-1 feed the previous proposal (one token each) and sample the next.

Proposals are sampled with the request's own sampling parameters from the seeded stream
`Stream.DRAFT` (independent of the target's draws), greedy rows by argmax; sampled rows keep the
draft's distribution for the target's rejection sampling. After verification the cache keeps
the real tokens and the accepted proposals, and the blocks past them go back to the draft's pool
(`verified`); a finished or preempted request's blocks all go (`release`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from llmop.engine.block_manager import BlockManager
from llmop.engine.checkpoint import open_checkpoint
from llmop.engine.config import EngineConfig
from llmop.engine.forward_batch import build_forward_batch
from llmop.engine.kv_cache import plan_kv_cache
from llmop.engine.model_config import ModelConfig
from llmop.engine.model_runner import ModelRunner
from llmop.engine.proposer import Proposal
from llmop.engine.request import Request
from llmop.engine.sampler import SampleRow, Stream, row_seed, sample
from llmop.engine.tokenizer import TextTokenizer
from llmop.engine.tp.shard import RankShard

log = logging.getLogger("llmop.engine")

TOKENIZER_PROBE = "Speculative decoding: the draft's tokenizer must be the target's. 0123 \u00e9\u4e2d {}\n\t"


@dataclass(frozen=True)
class _DraftChunk:
    """A draft step's chunk, in the shape `build_forward_batch` reads: its last token's logits."""

    request: Request
    start: int
    num_tokens: int
    num_spec: int = 0
    completes: bool = True


class DraftProposer:
    def __init__(self, runner: ModelRunner, blocks: BlockManager, eos_ids: tuple[int, ...]):
        self.runner, self.blocks, self.eos_ids = runner, blocks, eos_ids
        self.valid: dict[str, int] = {}  # per request: leading tokens whose KV the draft's cache holds

    def propose(self, wanted: Sequence[tuple[Request, int]]) -> list[Proposal]:
        active: list[tuple[Request, int, int]] = []  # (request, k, first token to catch up)
        for r, k in wanted:
            rid, n = r.request_id, r.num_tokens
            start = min(self.valid.get(rid, 0), n - 1)
            self.blocks.shrink(rid, start)
            if not self.blocks.can_hold(rid, n + k - 1):
                continue  # the draft's pool is full: no proposal this round
            self.blocks.grow(rid, n + k - 1)
            r.spec_token_ids = []  # the draft's tokens so far: `token_slice` feeds them back
            active.append((r, k, start))
        probs: dict[str, list[torch.Tensor]] = {r.request_id: [] for r, _, _ in active}
        for j in range(max((k for _, k, _ in active), default=0)):
            chunks, rows = [], []
            for r, k, start in active:
                if j < k:
                    n, index = r.num_tokens, len(r.output_token_ids) + j
                    chunks.append(_DraftChunk(r, start, n - start) if j == 0 else _DraftChunk(r, n + j - 1, 1))
                    rows.append(SampleRow(r.params, index, block_eos=index < r.params.min_tokens))
            batch = build_forward_batch(chunks, self.blocks.tables, self.blocks.block_size, rows)
            logits = self.runner.logits(batch)
            with torch.inference_mode():  # the sampler edits the logits in place
                result = sample(logits, rows, self.eos_ids, self.runner.generator, Stream.DRAFT, keep_probs=True)
            for i, c in enumerate(chunks):
                c.request.spec_token_ids.append(result.token_ids[i])
                if not c.request.params.greedy:
                    probs[c.request.request_id].append(result.probs[i].clone())
        out = {}
        for r, _, _ in active:
            self.valid[r.request_id] = r.num_tokens
            q = probs[r.request_id]
            out[r.request_id] = Proposal(tuple(r.spec_token_ids), tuple(q) if q else None)
        return [out.get(r.request_id, Proposal()) for r, _ in wanted]

    def verified(self, request: Request, num_proposed: int, num_accepted: int) -> None:
        """Proposal j's KV was written when proposal j + 1 was drafted: the last one has none."""
        rid = request.request_id
        if rid in self.valid:
            self.valid[rid] = request.num_tokens + min(num_accepted, num_proposed - 1)
            self.blocks.shrink(rid, self.valid[rid])

    def release(self, request_id: str) -> None:
        self.valid.pop(request_id, None)
        self.blocks.free(request_id)


def build_draft_proposer(config: EngineConfig, kv_dtype: torch.dtype, target: ModelConfig,
                         target_tokenizer: TextTokenizer, target_num_blocks: int, max_model_len: int,
                         eos_ids: tuple[int, ...]) -> DraftProposer:
    """Load `speculative.draft_model` and give it a KV cache: ValueError when its vocabulary or
    tokenizer differs from the target's, or its context is shorter than max_model_len."""
    spec = config.speculative
    ckpt = open_checkpoint(spec.draft_model)
    if ckpt.config.vocab_size != target.vocab_size:
        raise ValueError(f"draft_model {spec.draft_model}: its vocabulary has {ckpt.config.vocab_size} tokens, the "
                         f"target's {target.vocab_size}; a draft must use the target's tokenizer")
    if TextTokenizer(ckpt).encode(TOKENIZER_PROBE) != target_tokenizer.encode(TOKENIZER_PROBE):
        raise ValueError(f"draft_model {spec.draft_model}: its tokenizer encodes text differently from the "
                         "target's; a draft must use the target's tokenizer")
    if ckpt.config.max_position_embeddings < max_model_len:
        raise ValueError(f"draft_model {spec.draft_model}: its context ({ckpt.config.max_position_embeddings}) is "
                         f"shorter than max_model_len {max_model_len}")
    # Its own seed: unseeded proposals must not replay the target's random stream.
    runner = ModelRunner(config.model_copy(update={
        "model": spec.draft_model, "tensor_parallel_size": 1, "worker_processes": False, "max_loras": 0,
        "speculative": None, "seed": row_seed(config.seed, Stream.DRAFT)}), RankShard(0, 1), kv_dtype, eos_ids)
    per_block = runner.model_config.kv_bytes_per_token(torch.empty((), dtype=kv_dtype).element_size()) * config.block_size
    kv = plan_kv_cache(runner.model_config, kv_dtype, config.block_size,
                       spec.draft_kv_cache_memory_bytes or target_num_blocks * per_block)
    runner.allocate(kv)
    log.info("draft model %s: %d layers, KV cache %d blocks (%.1f MiB)", ckpt.name, runner.model_config.num_layers,
             kv.num_blocks, kv.num_blocks * kv.bytes_per_block / 2**20)
    return DraftProposer(runner, BlockManager(kv.num_blocks, config.block_size, enable_caching=False), eos_ids)
