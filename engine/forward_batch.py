"""The one thing a step hands to the model: a plain-data `ForwardBatch`.

The engine core builds it from the scheduler's chunks and the block tables; every rank (in this
process or a worker) turns it into device tensors and runs the same forward pass. It is plain data
(ints, tuples, frozen dataclasses, CPU tensors only for grammar bitmasks and adapter weights), so it
pickles to workers, and a test can build one and get logits back from a real engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from llmop.engine.sampler import SampleRow


@dataclass(frozen=True)
class SlotLoad:
    """Write `adapter` (a `LoraAdapter`, host tensors) into LoRA slot `slot` before the step."""

    slot: int
    adapter: object


@dataclass(frozen=True)
class LoraMapping:
    """The LoRA part of a step: per token its adapter slot (-1 = base model; None when no token
    uses an adapter), and the slot writes to apply first."""

    token_slots: tuple[int, ...] | None
    loads: tuple[SlotLoad, ...] = ()


@dataclass(frozen=True)
class ForwardBatch:
    input_ids: tuple[int, ...]
    positions: tuple[int, ...]
    slot_mapping: tuple[int, ...]  # where each token's K/V goes in the paged cache
    block_tables: tuple[tuple[int, ...], ...]  # per sequence, padded with 0 to one width
    seq_lens: tuple[int, ...]  # per sequence, context length including this step's tokens
    query_lens: tuple[int, ...]  # per sequence, tokens computed this step
    block_size: int
    logits_rows: tuple[int, ...]  # rows of the flat batch whose logits are computed (several per request allowed)
    row_requests: tuple[str, ...]  # request id of each logits row
    sample_rows: tuple[SampleRow, ...] = ()  # per logits row, when the step samples (else logits only)
    lora: LoraMapping | None = None
    block_copies: tuple[tuple[int, int], ...] = ()  # (source, destination) blocks to copy first

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)


def build_forward_batch(chunks: Sequence, tables: Mapping[str, Sequence[int]], block_size: int,
                        sample_rows: Sequence[SampleRow] = (), lora: LoraMapping | None = None,
                        block_copies: tuple[tuple[int, int], ...] = (), all_logits: bool = False) -> ForwardBatch:
    """Flatten scheduled chunks (`request`, `start`, `num_tokens`, `num_spec`, `completes`) in order.
    Logits rows: the last 1 + num_spec tokens of every chunk that completes its request
    (`sample_rows` describe those, in order), or every token with `all_logits` (scoring, tests)."""
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    seq_tables: list[tuple[int, ...]] = []
    seq_lens: list[int] = []
    q_lens: list[int] = []
    rows: list[int] = []
    row_requests: list[str] = []
    for c in chunks:
        rid = c.request.request_id
        table = tables[rid]
        end = c.start + c.num_tokens
        first = len(ids)
        ids.extend(c.request.token_slice(c.start, end))
        positions.extend(range(c.start, end))
        slots.extend(table[p // block_size] * block_size + p % block_size for p in range(c.start, end))
        seq_tables.append(tuple(table))
        seq_lens.append(end)
        q_lens.append(c.num_tokens)
        # A chunk with proposals verifies them: its last num_spec + 1 rows.
        wanted = range(first, len(ids)) if all_logits else (range(len(ids) - 1 - c.num_spec, len(ids)) if c.completes else [])
        rows.extend(wanted)
        row_requests.extend([rid] * len(wanted))
    if sample_rows and len(sample_rows) != len(rows):
        raise ValueError(f"{len(sample_rows)} sample rows for {len(rows)} logits rows")
    width = max((len(t) for t in seq_tables), default=0)
    padded = tuple(t + (0,) * (width - len(t)) for t in seq_tables)
    return ForwardBatch(tuple(ids), tuple(positions), tuple(slots), padded, tuple(seq_lens), tuple(q_lens),
                        block_size, tuple(rows), tuple(row_requests), tuple(sample_rows), lora, tuple(block_copies))
