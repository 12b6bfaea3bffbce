"""Tensor parallelism as a pass over the plain model (gpt-fast style): which slice of every weight a
rank holds, the rank's view of the model config, and the all-reduce after each row-parallel layer.

Column-parallel (q, k, v, gate, up): a rank holds a contiguous block of output rows, so its
attention heads and MLP columns are its own. Row-parallel (o, down): it holds the matching block of
input columns and produces a partial sum, which `apply_tensor_parallel` all-reduces at the output of
`self_attn` and `mlp` with forward hooks, so `model.py` has no TP branch. Embedding, norms and the LM
head are replicated: on the embedded model they are 22% of the weights; vocab-parallel would need a
gather of logits every step, which this CPU cannot amortise (see docs/engine.md).

When TP exceeds the KV heads, KV heads are replicated: rank r holds KV head r // (TP / kv_heads),
which is what the operator's sizing assumes (`operator/sizing/plan.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from llmop.engine.model_config import ModelConfig

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW_PARALLEL = ("o_proj", "down_proj")


@dataclass(frozen=True)
class RankShard:
    """Rank `rank` of `size`."""

    rank: int = 0
    size: int = 1


def valid_tensor_parallel_sizes(cfg: ModelConfig) -> list[int]:
    """Sizes that split the attention heads evenly and either split or replicate the KV heads."""
    return [t for t in range(1, cfg.num_heads + 1)
            if cfg.num_heads % t == 0 and (cfg.num_kv_heads % t == 0 or t % cfg.num_kv_heads == 0)
            and cfg.intermediate_size % t == 0]


def check_tensor_parallel(cfg: ModelConfig, size: int) -> None:
    """ValueError naming the head counts when `size` cannot split this model."""
    valid = valid_tensor_parallel_sizes(cfg)
    if size not in valid:
        raise ValueError(
            f"tensor_parallel_size {size} cannot split this model ({cfg.num_heads} attention heads, "
            f"{cfg.num_kv_heads} KV heads, MLP width {cfg.intermediate_size}): it must divide the attention "
            f"heads and the MLP width, and divide or be a multiple of the KV heads; valid sizes: {valid}")


def kv_heads_per_rank(cfg: ModelConfig, size: int) -> int:
    return max(1, cfg.num_kv_heads // size)


def rank_config(cfg: ModelConfig, size: int) -> ModelConfig:
    """The model config one rank builds: its share of heads and MLP columns."""
    check_tensor_parallel(cfg, size)
    if size == 1:
        return cfg
    return dataclasses.replace(cfg, num_heads=cfg.num_heads // size, num_kv_heads=kv_heads_per_rank(cfg, size),
                               intermediate_size=cfg.intermediate_size // size)


def _module(name: str) -> str | None:
    """`model.layers.3.self_attn.q_proj.weight` -> `q_proj` (None for anything else)."""
    parts = name.split(".")
    return parts[-2] if len(parts) >= 2 and parts[-2] in COLUMN_PARALLEL + ROW_PARALLEL else None


def module_slice(cfg: ModelConfig, module: str, shard: RankShard) -> tuple[int, int, int]:
    """(dim of the [out, in] weight, start, length) this rank holds of a projection's weight."""
    t, r = shard.size, shard.rank
    d = cfg.head_dim
    if module == "q_proj":
        n = cfg.num_heads // t * d
        return 0, r * n, n
    if module in ("k_proj", "v_proj"):
        per = kv_heads_per_rank(cfg, t)
        head = r * per if cfg.num_kv_heads >= t else r // (t // cfg.num_kv_heads)
        return 0, head * d, per * d
    if module in ("gate_proj", "up_proj", "down_proj"):
        n = cfg.intermediate_size // t
        return (0 if module != "down_proj" else 1), r * n, n
    if module == "o_proj":
        n = cfg.num_heads // t * d
        return 1, r * n, n
    raise KeyError(module)


def weight_slice(cfg: ModelConfig, shard: RankShard, name: str, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """What `load_state_dict(select=...)` asks: the slice of tensor `name` this rank loads, or None
    for the whole tensor (replicated). A column-parallel bias is sliced like its rows."""
    if shard.size == 1:
        return None
    module = _module(name)
    if module is None:
        return None
    dim, start, length = module_slice(cfg, module, shard)
    if len(shape) == 1:  # bias: only column-parallel layers split it (row-parallel ones add it once)
        return (0, start, length) if dim == 0 else None
    return dim, start, length


def take_slice(t: torch.Tensor, where: tuple[int, int, int] | None) -> torch.Tensor:
    return t if where is None else t.narrow(where[0], where[1], where[2]).contiguous()


def apply_tensor_parallel(model: torch.nn.Module, group=None) -> list:
    """All-reduce the partial sums of every layer's attention and MLP outputs (in place); returns
    the hook handles. A row-parallel bias (none in Llama) would be added by every rank."""

    def all_reduce(_module, _inputs, output):
        torch.distributed.all_reduce(output, group=group)
        return output

    handles = []
    for layer in model.model.layers:
        handles.append(layer.self_attn.register_forward_hook(all_reduce))
        handles.append(layer.mlp.register_forward_hook(all_reduce))
    return handles


def shard_lora_weights(cfg: ModelConfig, shard: RankShard, module: str,
                       a: torch.Tensor, b_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An adapter's (A [rank, in], B^T [rank, out]) for one projection, sliced like its base layer:
    a column-parallel layer keeps A whole and slices B's output columns; a row-parallel one slices
    A's input columns and keeps B whole (its partial sum joins the base layer's all-reduce)."""
    if shard.size == 1:
        return a, b_t
    dim, start, length = module_slice(cfg, module, shard)
    if dim == 0:
        return a, b_t.narrow(1, start, length).contiguous()
    return a.narrow(1, start, length).contiguous(), b_t
