"""Paged attention: the references against dense SDPA, the Triton kernels against the references."""

import pytest
import torch

from llmop.kernels.paged_attention_decode import paged_attention_decode, ref_paged_attention_decode
from llmop.kernels.paged_attention_prefill import paged_attention_prefill, ref_paged_attention_prefill

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

# (num_seqs, num_kv_heads, gqa, head_dim, block_size, dtype, num_splits, block_n)
DECODE_CASES = [
    (1, 2, 1, 64, 16, F32, 1, 64),
    (7, 2, 3, 128, 16, BF16, 3, 16),
    (33, 1, 8, 64, 16, F16, None, 64),
    (5, 2, 3, 64, 5, F32, 4, 16),
    (3, 1, 8, 128, 16, BF16, 2, 16),
    (12, 2, 1, 128, 8, F16, 1, 16),
]


def _ids(cases):
    return ["-".join(str(x).replace("torch.", "") for x in c) for c in cases]


@pytest.mark.parametrize("case", DECODE_CASES, ids=_ids(DECODE_CASES))
def test_decode_kernel_matches_reference(case, paged_case, seq_lens_for, attn_tol, device):
    num_seqs, kvh, gqa, head_dim, block_size, dtype, num_splits, block_n = case
    lens = seq_lens_for(num_seqs, block_size, seed=num_seqs)
    c = paged_case(lens, [1] * num_seqs, kvh, gqa, head_dim, block_size, dtype, device, seed=num_seqs)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens)
    ref = ref_paged_attention_decode(*args)
    out = paged_attention_decode(*args, out=c.poisoned_out(), num_splits=num_splits, block_n=block_n)
    atol, rtol = attn_tol[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)


# (seq_lens, q_lens, num_kv_heads, gqa, head_dim, block_size, dtype, block_m, block_n)
PREFILL_CASES = [
    ([9], [9], 2, 1, 64, 16, F32, 16, 16),                                  # one prompt, one launch
    ([40, 17, 1, 33], [40, 5, 1, 16], 1, 8, 64, 16, BF16, 64, 64),           # prompt, chunks, decode
    ([35, 16, 3, 20, 50], [3, 16, 2, 1, 18], 2, 3, 128, 16, F16, 16, 16),    # chunked, GQA 3
    ([12, 30, 10, 7], [12, 29, 0, 1], 2, 3, 64, 5, F32, 64, 16),             # odd block size, q_len 0
]


@pytest.mark.parametrize("case", PREFILL_CASES, ids=[f"p{i}" for i in range(len(PREFILL_CASES))])
def test_prefill_kernel_matches_reference(case, paged_case, attn_tol, device):
    seq_lens, q_lens, kvh, gqa, head_dim, block_size, dtype, block_m, block_n = case
    c = paged_case(seq_lens, q_lens, kvh, gqa, head_dim, block_size, dtype, device, seed=len(seq_lens), pad_tokens=2)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens, c.query_start_loc)
    ref = ref_paged_attention_prefill(*args, out=c.poisoned_out())
    out = paged_attention_prefill(*args, out=c.poisoned_out(), block_m=block_m, block_n=block_n)
    n = int(c.query_start_loc[-1])
    atol, rtol = attn_tol[dtype]
    torch.testing.assert_close(out[:n].float(), ref[:n].float(), atol=atol, rtol=rtol)
    assert out[n:].isnan().all(), "padding tokens past query_start_loc[-1] must stay unwritten"


def test_prefill_kernel_mixed_batch_of_33(paged_case, seq_lens_for, attn_tol, device):
    """33 sequences: most decode rows, some prefill chunks, GQA 8, head_dim 128."""
    lens = seq_lens_for(33, 16, seed=3)
    gen = torch.Generator().manual_seed(4)
    q_lens = [1 if i % 4 else int(torch.randint(1, n + 1, (1,), generator=gen)) for i, n in enumerate(lens)]
    c = paged_case(lens, q_lens, 1, 8, 128, 16, BF16, device, seed=5)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens, c.query_start_loc)
    out = paged_attention_prefill(*args, out=c.poisoned_out())
    torch.testing.assert_close(out.float(), ref_paged_attention_prefill(*args).float(), atol=2e-2, rtol=2e-2)


def test_decode_padding_sequences_give_zeros(paged_case, device):
    """Sequences of length 0 (batch padding, e.g. for CUDA graphs) come out as zeros, not NaN."""
    c = paged_case([5, 0, 20], [1, 1, 1], 1, 3, 64, 16, F32, device, seed=8)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens)
    for splits in (1, 2):
        out = paged_attention_decode(*args, out=c.poisoned_out(), num_splits=splits, block_n=16)
        torch.testing.assert_close(out, ref_paged_attention_decode(*args), atol=2e-5, rtol=1e-5)
        assert torch.equal(out[1], torch.zeros_like(out[1]))


def test_decode_rows_agree_between_kernels(paged_case, seq_lens_for, device):
    """A decode batch gives the same result through the prefill kernel (q_len = 1 everywhere)."""
    lens = seq_lens_for(6, 16, seed=6)
    c = paged_case(lens, [1] * 6, 2, 3, 64, 16, F32, device, seed=6)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens)
    dec = paged_attention_decode(*args, out=c.poisoned_out(), num_splits=2, block_n=16)
    pre = paged_attention_prefill(*args, c.query_start_loc, out=c.poisoned_out())
    torch.testing.assert_close(dec, pre, atol=2e-5, rtol=1e-5)


# The references themselves, against SDPA on gathered contiguous K/V (fast: no interpreter).
@pytest.mark.parametrize("gqa", [1, 3, 8])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_references_match_dense_sdpa(gqa, head_dim, paged_case, seq_lens_for):
    lens = seq_lens_for(9, 16, seed=gqa + head_dim)
    gen = torch.Generator().manual_seed(gqa)
    q_lens = [int(torch.randint(1, n + 1, (1,), generator=gen)) for n in lens]
    c = paged_case(lens, q_lens, 2, gqa, head_dim, 16, F32, "cpu", seed=gqa * head_dim)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens, c.query_start_loc)
    dense = c.dense(scale=0.1)
    torch.testing.assert_close(ref_paged_attention_prefill(*args, scale=0.1), dense, atol=1e-5, rtol=1e-5)

    d = paged_case(lens, [1] * len(lens), 2, gqa, head_dim, 16, F32, "cpu", seed=gqa * head_dim)
    dec = ref_paged_attention_decode(d.query, d.key_cache, d.value_cache, d.block_tables, d.seq_lens)
    torch.testing.assert_close(dec, d.dense(), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_decode_long_context_many_splits(dtype, paged_case, attn_tol, device):
    """Contexts of several hundred tokens split 16 ways, with tiles spanning blocks."""
    lens = [700, 1, 333, 512]
    c = paged_case(lens, [1] * 4, 2, 4, 128, 16, dtype, device, seed=9)
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens)
    out = paged_attention_decode(*args, out=c.poisoned_out(), num_splits=16)
    atol, rtol = attn_tol[dtype]
    torch.testing.assert_close(out.float(), ref_paged_attention_decode(*args).float(), atol=atol, rtol=rtol)
