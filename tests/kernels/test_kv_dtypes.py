"""KV caches in another dtype than the model: fp8 e4m3 with per-tensor scales, and a bf16 cache
under an fp32 query. Kernels against references, references against dense attention over the
dequantized contexts."""

import pytest
import torch

from llmop.kernels.paged_attention_decode import paged_attention_decode, ref_paged_attention_decode
from llmop.kernels.paged_attention_prefill import paged_attention_prefill, ref_paged_attention_prefill
from llmop.kernels.reshape_and_cache import FP8, reshape_and_cache, ref_reshape_and_cache, to_cache

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
K_SCALE, V_SCALE = 0.37, 2.5  # irregular, so a kernel that drops or inverts a scale is off


def _as_cache(case, dtype, k_scale=1.0, v_scale=1.0):
    """The case's caches stored as `dtype` (fp8: divided by the scales); NaN poison stays NaN."""
    return to_cache(case.key_cache, dtype, k_scale), to_cache(case.value_cache, dtype, v_scale)


def _dequantized_dense(case, kc, vc, k_scale, v_scale):
    """Dense attention over the contexts as the cache holds them (rounded to its dtype)."""
    bs = kc.shape[1]
    keys, values = [], []
    for i, n in enumerate(case.seq_lens.tolist()):
        pos = torch.arange(n, device=kc.device)
        blk = case.block_tables[i, pos // bs].long()
        keys.append(kc[blk, pos % bs].float() * k_scale)
        values.append(vc[blk, pos % bs].float() * v_scale)
    case.keys, case.values = keys, values
    return case.dense()


@pytest.mark.parametrize("num_tokens,heads,head_dim,block_size,scale", [(17, 2, 64, 16, K_SCALE), (5, 3, 128, 5, 1.0)])
def test_fp8_store_matches_reference_and_saturates(num_tokens, heads, head_dim, block_size, scale, device):
    gen = torch.Generator().manual_seed(num_tokens)
    num_blocks = num_tokens // block_size + 3
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[1] = -1
    key = (torch.randn(num_tokens, heads, head_dim, generator=gen) * 300).to(BF16)  # beyond 448 * scale
    value = torch.randn(num_tokens, heads, head_dim, generator=gen).to(BF16)
    shape = (num_blocks, block_size, heads, head_dim)
    kc, vc = torch.zeros(shape, dtype=FP8), torch.zeros(shape, dtype=FP8)
    ref_k, ref_v = kc.clone(), vc.clone()
    ref_reshape_and_cache(key, value, ref_k, ref_v, slots, scale, V_SCALE)
    tensors = [t.to(device) for t in (key, value, kc, vc, slots)]
    reshape_and_cache(*tensors, k_scale=scale, v_scale=V_SCALE)
    assert torch.equal(tensors[2].cpu().view(torch.uint8), ref_k.view(torch.uint8))
    assert torch.equal(tensors[3].cpu().view(torch.uint8), ref_v.view(torch.uint8))
    stored = ref_k.view(-1, heads, head_dim)[slots[slots >= 0]].float()
    assert stored.abs().max() == 448.0, "values past the range saturate instead of becoming NaN"
    assert not stored.isnan().any()
    err = (stored * scale - key[slots >= 0].float()).abs()
    inside = key[slots >= 0].float().abs() < 400 * scale
    assert (err[inside] <= key[slots >= 0].float().abs()[inside] / 16 + 1e-2).all()  # e4m3: 3 mantissa bits


# (num_seqs, num_kv_heads, gqa, head_dim, block_size, query dtype, cache dtype, num_splits)
DECODE = [
    (5, 2, 3, 64, 16, BF16, FP8, 3),
    (9, 1, 8, 128, 5, F16, FP8, 1),
    (6, 2, 1, 64, 16, F32, BF16, 2),
]


@pytest.mark.parametrize("case", DECODE, ids=[f"d{i}" for i in range(len(DECODE))])
def test_decode_with_a_cache_of_another_dtype(case, paged_case, seq_lens_for, device):
    num_seqs, kvh, gqa, head_dim, bs, qdt, cdt, splits = case
    lens = seq_lens_for(num_seqs, bs, seed=num_seqs)
    c = paged_case(lens, [1] * num_seqs, kvh, gqa, head_dim, bs, qdt, device, seed=num_seqs)
    ks, vs = (K_SCALE, V_SCALE) if cdt == FP8 else (1.0, 1.0)
    kc, vc = _as_cache(c, cdt, ks, vs)
    args = (c.query, kc, vc, c.block_tables, c.seq_lens)
    ref = ref_paged_attention_decode(*args, k_scale=ks, v_scale=vs)
    dense = _dequantized_dense(c, kc, vc, ks, vs)
    tol = 3e-2 if qdt != F32 else 1e-4
    torch.testing.assert_close(ref.float(), dense.float(), atol=tol, rtol=tol)
    out = paged_attention_decode(*args, out=c.poisoned_out(), num_splits=splits, block_n=16, k_scale=ks, v_scale=vs)
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


PREFILL = [
    ([40, 17, 1, 33], [40, 5, 1, 16], 1, 8, 64, 16, BF16, FP8),
    ([12, 30, 7], [12, 29, 1], 2, 3, 64, 5, F32, BF16),
]


@pytest.mark.parametrize("case", PREFILL, ids=[f"p{i}" for i in range(len(PREFILL))])
def test_prefill_with_a_cache_of_another_dtype(case, paged_case, device):
    seq_lens, q_lens, kvh, gqa, head_dim, bs, qdt, cdt = case
    c = paged_case(seq_lens, q_lens, kvh, gqa, head_dim, bs, qdt, device, seed=len(seq_lens), pad_tokens=1)
    ks, vs = (K_SCALE, V_SCALE) if cdt == FP8 else (1.0, 1.0)
    kc, vc = _as_cache(c, cdt, ks, vs)
    args = (c.query, kc, vc, c.block_tables, c.seq_lens, c.query_start_loc)
    n = int(c.query_start_loc[-1])
    ref = ref_paged_attention_prefill(*args, out=c.poisoned_out(), k_scale=ks, v_scale=vs)
    dense = _dequantized_dense(c, kc, vc, ks, vs)
    tol = 3e-2 if qdt != F32 else 1e-4
    torch.testing.assert_close(ref[:n].float(), dense.float(), atol=tol, rtol=tol)
    out = paged_attention_prefill(*args, out=c.poisoned_out(), block_m=16, block_n=16, k_scale=ks, v_scale=vs)
    torch.testing.assert_close(out[:n].float(), ref[:n].float(), atol=tol, rtol=tol)
