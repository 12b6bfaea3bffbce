"""The tensor-parallel cut as pure functions (no model, no processes): every rank's slices put back
together give the whole weight, and past the KV head count each rank holds the KV head its query
heads read (a synthetic 8-head, 2-KV-head model at TP 2, 4 and 8)."""

import dataclasses

import pytest
import torch

from llmop.engine.model_config import ModelConfig
from llmop.engine.tp.shard import (RankShard, check_tensor_parallel, module_slice, rank_config, shard_lora_weights,
                                   take_slice, valid_tensor_parallel_sizes, weight_slice)

CFG = ModelConfig(architecture="llama", vocab_size=100, hidden_size=64, intermediate_size=96, num_layers=1,
                  num_heads=8, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-5, rope_theta=1e4,
                  max_position_embeddings=64, tie_word_embeddings=True)
SHAPES = {"q_proj": (64, 64), "k_proj": (16, 64), "v_proj": (16, 64), "o_proj": (64, 64),
          "gate_proj": (96, 64), "up_proj": (96, 64), "down_proj": (64, 96)}


def name(module):
    return f"model.layers.0.{'self_attn' if module.endswith(('q_proj', 'k_proj', 'v_proj', 'o_proj')) else 'mlp'}.{module}.weight"


def test_valid_sizes_split_heads_and_mlp_and_divide_or_replicate_kv_heads():
    assert valid_tensor_parallel_sizes(CFG) == [1, 2, 4, 8]
    assert valid_tensor_parallel_sizes(dataclasses.replace(CFG, intermediate_size=100)) == [1, 2, 4]
    with pytest.raises(ValueError, match=r"tensor_parallel_size 3 cannot split .*8 attention heads, 2 KV heads"):
        check_tensor_parallel(CFG, 3)


@pytest.mark.parametrize("t", [2, 4])
def test_the_slices_of_split_layers_put_back_give_the_whole_weight(t):
    gen = torch.Generator().manual_seed(t)
    for module in ("q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        w = torch.randn(SHAPES[module], generator=gen)
        parts = [take_slice(w, weight_slice(CFG, RankShard(r, t), name(module), w.shape)) for r in range(t)]
        dim = module_slice(CFG, module, RankShard(0, t))[0]
        assert torch.equal(torch.cat(parts, dim=dim), w), module


@pytest.mark.parametrize("t", [2, 4, 8])
def test_each_rank_holds_the_kv_head_its_query_heads_read(t):
    cfg = rank_config(CFG, t)
    assert cfg.num_heads == 8 // t and cfg.num_kv_heads == max(1, 2 // t)
    k = torch.arange(16 * 64, dtype=torch.float32).reshape(16, 64)  # 2 KV heads x head_dim 8 rows
    for r in range(t):
        got = take_slice(k, weight_slice(CFG, RankShard(r, t), name("k_proj"), k.shape))
        first_q_head = r * (8 // t)
        kv_head = first_q_head // 4  # GQA: query head h reads KV head h // (8 / 2)
        assert torch.equal(got[:8], k[kv_head * 8:(kv_head + 1) * 8]), (t, r)
        assert got.shape[0] == cfg.num_kv_heads * 8


def test_biases_split_with_column_layers_only_and_norms_stay_whole():
    shard = RankShard(1, 2)
    assert weight_slice(CFG, shard, "model.layers.0.self_attn.q_proj.bias", (64,)) == (0, 32, 32)
    assert weight_slice(CFG, shard, "model.layers.0.self_attn.o_proj.bias", (64,)) is None
    assert weight_slice(CFG, shard, "model.layers.0.input_layernorm.weight", (64,)) is None
    assert weight_slice(CFG, shard, "model.embed_tokens.weight", (100, 64)) is None


def test_lora_is_cut_like_its_base_layer():
    gen = torch.Generator().manual_seed(0)
    t = 4
    for module, dim in (("q_proj", 0), ("down_proj", 1)):
        out_f, in_f = SHAPES[module]
        a, b_t = torch.randn(4, in_f, generator=gen), torch.randn(4, out_f, generator=gen)
        x = torch.randn(3, in_f, generator=gen)
        full = x @ a.T @ b_t  # [3, out]
        parts = []
        for r in range(t):
            ar, br = shard_lora_weights(CFG, RankShard(r, t), module, a, b_t)
            _, start, length = module_slice(CFG, module, RankShard(r, t))
            xr = x if dim == 0 else x[:, start:start + length]
            parts.append(xr @ ar.T @ br)
        got = torch.cat(parts, dim=1) if dim == 0 else sum(parts)  # column: concatenated; row: all-reduced
        torch.testing.assert_close(got, full)
