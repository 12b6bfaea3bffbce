"""Turns a scheduler decision into one forward pass and the sampled tokens.

It flattens the scheduled chunks into token ids, positions, slot mapping and block tables, runs the
model once, takes logits only at the last token of the chunks that complete their request, and
samples them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmop.engine.attention import AttentionBackend, AttentionMetadata
from llmop.engine.block_manager import BlockManager
from llmop.engine.model import LlamaForCausalLM
from llmop.engine.sampler import SampleResult, SampleRow, sample
from llmop.engine.scheduler import SchedulerOutput


@dataclass(frozen=True)
class BatchInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # rows of the flattened batch whose logits are sampled


def build_batch(out: SchedulerOutput, blocks: BlockManager, device: torch.device) -> BatchInputs:
    """Flatten the scheduled chunks (pure bookkeeping, no model)."""
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    tables: list[list[int]] = []
    seq_lens: list[int] = []
    q_lens: list[int] = []
    logits_idx: list[int] = []
    bs = blocks.block_size
    for c in out.chunks:
        rid = c.request.request_id
        table = blocks.tables[rid]
        end = c.start + c.num_tokens
        ids.extend(c.request.token_slice(c.start, end))
        positions.extend(range(c.start, end))
        slots.extend(table[p // bs] * bs + p % bs for p in range(c.start, end))
        tables.append(table)
        seq_lens.append(end)
        q_lens.append(c.num_tokens)
        if c.completes:
            logits_idx.append(len(ids) - 1)
    width = max(len(t) for t in tables)
    padded = [t + [0] * (width - len(t)) for t in tables]
    qsl = [0]
    for q in q_lens:
        qsl.append(qsl[-1] + q)

    def t(x, dtype):
        return torch.tensor(x, dtype=dtype, device=device)

    meta = AttentionMetadata(
        slot_mapping=t(slots, torch.long),
        block_tables=t(padded, torch.int32),
        seq_lens=t(seq_lens, torch.int32),
        query_start_loc=t(qsl, torch.int32),
        seq_lens_list=tuple(seq_lens),
        query_lens_list=tuple(q_lens),
        max_seq_len=max(seq_lens),
        block_size=bs,
    )
    return BatchInputs(t(ids, torch.long), t(positions, torch.long), meta, t(logits_idx, torch.long))


def copy_blocks(kv_caches, copies: tuple[tuple[int, int], ...], device: torch.device) -> None:
    """Copy-on-write before a step: block `dst` gets block `src`'s keys and values in every layer
    (a choice of an n > 1 request starting from its leader's partial last prompt block)."""
    if not copies:
        return
    src = torch.tensor([s for s, _ in copies], dtype=torch.long, device=device)
    dst = torch.tensor([d for _, d in copies], dtype=torch.long, device=device)
    with torch.inference_mode():
        for layer in kv_caches:
            for cache in layer:
                raw = cache.view(torch.uint8) if cache.element_size() == 1 else cache  # fp8: copy the bytes
                raw.index_copy_(0, dst, raw.index_select(0, src))


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, kv_caches, backend: AttentionBackend,
                 device: torch.device, eos_ids: tuple[int, ...], seed: int = 0):
        self.model = model
        self.kv_caches = kv_caches
        self.backend = backend
        self.device = device
        self.eos_ids = eos_ids
        self.generator = torch.Generator().manual_seed(seed)

    @torch.inference_mode()
    def logits(self, batch: BatchInputs) -> torch.Tensor:
        meta = self.backend.prepare(batch.meta, self.kv_caches[0][0])
        hidden = self.model(batch.input_ids, batch.positions, self.kv_caches, meta, self.backend)
        return self.model.compute_logits(hidden[batch.logits_indices])

    def execute(self, out: SchedulerOutput, blocks: BlockManager, rows: list[SampleRow]) -> SampleResult | None:
        """Run the step; `rows` describe, in order, the chunks that complete (and so sample)."""
        copy_blocks(self.kv_caches, out.block_copies, self.device)
        batch = build_batch(out, blocks, self.device)
        logits = self.logits(batch)
        if not rows:
            return None
        with torch.inference_mode():  # the sampler edits the logits in place: they are inference tensors
            return sample(logits.cpu(), rows, self.eos_ids, self.generator)
