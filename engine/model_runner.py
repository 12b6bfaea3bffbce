"""One rank's model: its weights, its KV cache, and the forward pass of a `ForwardBatch`.

A runner loads only its own slices of the checkpoint (`tp.shard.weight_slice`), builds the plain
model for its share of the heads, applies the tensor-parallel pass when there are several ranks,
quantizes after sharding, and allocates the KV cache the core planned. Each step it turns the
plain-data batch into device tensors, runs the model once, and on rank 0 computes the logits of
the batch's logits rows and samples them. The same class runs in the core's process
(`executor.InProcessExecutor`) and in worker processes (`tp.worker`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

from llmop.engine.attention import AttentionMetadata, get_attention_backend
from llmop.engine.checkpoint import load_state_dict, open_checkpoint
from llmop.engine.config import EngineConfig
from llmop.engine.device_caps import resolve_device, resolve_dtype
from llmop.engine.forward_batch import ForwardBatch
from llmop.engine.kv_cache import KVCacheSpec, allocate_kv_cache, available_memory
from llmop.engine.lora.runtime import LoraRuntime
from llmop.engine.model import build_model
from llmop.engine.fp16_weights import Fp16Op, convert_fp16
from llmop.engine.quantization import int8_slowdown, quantize_int8
from llmop.engine.sampler import SampleResult, sample
from llmop.engine.tp.shard import RankShard, apply_tensor_parallel, rank_config, weight_slice

log = logging.getLogger("llmop.engine")


@dataclass(frozen=True)
class RankInfo:
    """What a rank reports after allocating (logged by the core; checked by tests)."""

    rank: int
    pid: int
    device: str
    dtype: str
    kv_dtype: str
    num_heads: int
    num_kv_heads: int
    num_blocks: int
    kv_bytes: int
    int8_layers: int
    weight_bytes: int  # the weights this rank holds (its slices plus the replicated parts)
    fp16_op: str = ""  # the op its fp16 weights are packed for (`fp16_weights.Fp16Op`), "" without them


def rank_device(device: torch.device, shard: RankShard) -> torch.device:
    """cuda:<rank> on CUDA (one GPU per rank), the CPU otherwise."""
    return torch.device("cuda", shard.rank) if device.type == "cuda" else device


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
    def __init__(self, config: EngineConfig, shard: RankShard, kv_dtype: torch.dtype,
                 eos_ids: tuple[int, ...], group=None):
        self.config, self.shard, self.kv_dtype, self.eos_ids = config, shard, kv_dtype, eos_ids
        self.device = rank_device(resolve_device(config.device), shard)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if config.quantization == "auto":
            raise ValueError("a rank takes the quantization the engine core resolved, not auto")
        self.dtype, _ = resolve_dtype(config.dtype, self.device, config.quantization)  # a name: the core's choice
        ckpt = open_checkpoint(config.model)
        self.full_config = ckpt.config
        self.model_config = rank_config(ckpt.config, shard.size)
        weights = load_state_dict(ckpt, self.dtype, lambda name, shape: weight_slice(ckpt.config, shard, name, shape))
        self.model = build_model(self.model_config, weights, self.dtype, self.device,
                                 max_positions=ckpt.config.max_position_embeddings)
        del weights
        if shard.size > 1:
            apply_tensor_parallel(self.model, group)
        self.int8_layers = quantize_int8(self.model, self.dtype) if config.quantization == "int8" else 0
        self.fp16_op = Fp16Op.for_threads(torch.get_num_threads()) if config.quantization == "fp16" else None
        if self.fp16_op is not None:  # packed for this rank's threads (a TP worker set them already)
            log.info("fp16 weights (fbgemm, %s) in %d linear layers, fp32 activations", self.fp16_op.value,
                     convert_fp16(self.model, self.device, self.dtype, self.fp16_op))
        if self.int8_layers and (why := int8_slowdown(self.device, self.dtype)) is not None:
            log.warning("%s", why)
        self.backend = get_attention_backend(config.attention_backend, self.device)
        self.lora = (LoraRuntime(self.model, ckpt.config, shard, config.max_loras, config.max_lora_rank,
                                 config.lora_backend, self.device, self.dtype) if config.max_loras > 0 else None)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.kv_spec: KVCacheSpec | None = None

    def free_memory(self) -> int:
        """Memory this rank may use for its KV cache: free device memory, or on the CPU the host's
        available memory shared by the ranks."""
        free = available_memory(self.device)
        return free if self.device.type == "cuda" else free // self.shard.size

    def allocate(self, spec: KVCacheSpec) -> None:
        self.kv_spec = spec
        self.kv_caches = allocate_kv_cache(self.model_config, spec, self.kv_dtype, self.device)

    def describe(self) -> RankInfo:
        c = self.model_config
        return RankInfo(self.shard.rank, os.getpid(), str(self.device), str(self.dtype).removeprefix("torch."),
                        str(self.kv_dtype).removeprefix("torch."), c.num_heads, c.num_kv_heads,
                        self.kv_spec.num_blocks if self.kv_spec else 0,
                        sum(t.nbytes for layer in self.kv_caches for t in layer), self.int8_layers,
                        _tensor_bytes(self.model), self.fp16_op.value if self.fp16_op else "")

    def _inputs(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        def t(x, dtype):
            return torch.tensor(x, dtype=dtype, device=self.device)

        qsl = [0]
        for q in batch.query_lens:
            qsl.append(qsl[-1] + q)
        meta = AttentionMetadata(
            slot_mapping=t(batch.slot_mapping, torch.long),
            block_tables=t(batch.block_tables, torch.int32),
            seq_lens=t(batch.seq_lens, torch.int32),
            query_start_loc=t(qsl, torch.int32),
            seq_lens_list=batch.seq_lens,
            query_lens_list=batch.query_lens,
            max_seq_len=max(batch.seq_lens),
            block_size=batch.block_size,
        )
        return t(batch.input_ids, torch.long), t(batch.positions, torch.long), meta

    @torch.inference_mode()
    def _forward(self, batch: ForwardBatch) -> torch.Tensor:
        copy_blocks(self.kv_caches, batch.block_copies, self.device)
        ids, positions, meta = self._inputs(batch)
        meta = self.backend.prepare(meta, self.kv_caches[0][0])
        lora = self.lora.step(batch.lora) if self.lora is not None else _no_lora(batch)
        with lora:
            return self.model(ids, positions, self.kv_caches, meta, self.backend)

    @torch.inference_mode()
    def logits(self, batch: ForwardBatch) -> torch.Tensor:
        """Run the step; float32 logits [len(batch.logits_rows), vocab] on the CPU."""
        hidden = self._forward(batch)
        rows = torch.tensor(batch.logits_rows, dtype=torch.long, device=self.device)
        return self.model.compute_logits(hidden[rows]).cpu()

    def execute(self, batch: ForwardBatch) -> SampleResult | None:
        """Run the step; rank 0 samples `batch.sample_rows` (None when the step samples nothing
        and on the other ranks, which only take part in the all-reduces)."""
        if self.shard.rank != 0 or not batch.sample_rows:
            with torch.inference_mode():
                self._forward(batch)
            return None
        logits = self.logits(batch)
        with torch.inference_mode():  # the sampler edits the logits in place: they are inference tensors
            return sample(logits, batch.sample_rows, self.eos_ids, self.generator)


def _tensor_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights: the state dict (parameters and persistent buffers: int8 weights and
    their scales), a tied head once; not the tables derived from the config (RoPE's cos/sin, which
    are non-persistent buffers), which are no weights."""
    tensors = sum({id(t): t.nbytes for t in model.state_dict(keep_vars=True).values()}.values())
    return tensors + sum(getattr(m, "packed_bytes", 0) for m in model.modules())  # fbgemm's fp16 weights


def _no_lora(batch: ForwardBatch):
    if batch.lora is not None and (batch.lora.loads or batch.lora.token_slots is not None):
        raise ValueError("this step uses LoRA adapters but the engine runs with max_loras 0")
    import contextlib

    return contextlib.nullcontext()
