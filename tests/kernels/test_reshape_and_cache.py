"""reshape_and_cache: the kernel writes exactly the slots the reference writes, nothing else."""

import pytest
import torch

from llmop.kernels.reshape_and_cache import reshape_and_cache, ref_reshape_and_cache

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


@pytest.mark.parametrize(
    "num_tokens,num_kv_heads,head_dim,block_size,src_dtype,cache_dtype",
    [(1, 1, 64, 16, F32, F32), (33, 2, 128, 16, BF16, BF16), (20, 3, 64, 5, F32, F16), (7, 8, 128, 16, F16, F16)],
)
def test_kernel_matches_reference(num_tokens, num_kv_heads, head_dim, block_size, src_dtype, cache_dtype, device):
    gen = torch.Generator().manual_seed(num_tokens)
    num_blocks = num_tokens // block_size + 4
    # distinct slots in shuffled order, some tokens padded out with -1
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    drop = torch.rand(num_tokens, generator=gen) < 0.2
    drop[0] = False  # at least one token is written
    slots[drop] = -1
    # key/value as strided views of a fused qkv-like buffer (row stride != heads * dim)
    fused = torch.randn(num_tokens, 3, num_kv_heads, head_dim, generator=gen).to(src_dtype)
    key, value = fused[:, 1], fused[:, 2]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen).to(cache_dtype)
    value_cache = torch.randn(shape, generator=gen).to(cache_dtype)
    ref_k, ref_v = key_cache.clone(), value_cache.clone()
    ref_reshape_and_cache(key, value, ref_k, ref_v, slots)
    tensors = [t.to(device) for t in (key, value, key_cache, value_cache, slots)]
    reshape_and_cache(*tensors)
    assert torch.equal(tensors[2].cpu(), ref_k) and torch.equal(tensors[3].cpu(), ref_v)
    # and the reference did what it says: the written slots hold the (cast) token rows
    keep = slots >= 0
    flat = ref_k.view(-1, num_kv_heads, head_dim)
    assert torch.equal(flat[slots[keep]], key[keep].to(cache_dtype))
    untouched = torch.ones(num_blocks * block_size, dtype=torch.bool)
    untouched[slots[keep]] = False
    assert torch.equal(flat[untouched], key_cache.view(-1, num_kv_heads, head_dim)[untouched])


def test_rejects_mismatched_shapes():
    key = torch.zeros(4, 2, 64)
    cache = torch.zeros(3, 16, 2, 128)
    with pytest.raises(ValueError):
        ref_reshape_and_cache(key, key, cache, cache, torch.zeros(4, dtype=torch.int64))


@pytest.mark.parametrize("padded", [False, True])
def test_reference_writes_each_token_to_its_slot(padded):
    """With and without padding slots (-1, skipped), every other token lands in its slot and
    nothing else changes (the reference skips its boolean mask when there is no padding)."""
    gen = torch.Generator().manual_seed(int(padded))
    cache = torch.randn(6, 4, 2, 8, generator=gen)
    values = torch.randn(5, 2, 8, generator=gen)
    slots = torch.tensor([3, 17, -1, 0, 22]) if padded else torch.tensor([3, 17, 9, 0, 22])
    expected = cache.clone().view(-1, 2, 8)
    for token, slot in enumerate(slots.tolist()):
        if slot >= 0:
            expected[slot] = values[token]
    k, v = cache.clone(), cache.clone()
    ref_reshape_and_cache(values, values, k, v, slots)
    assert torch.equal(k.view(-1, 2, 8), expected) and torch.equal(v.view(-1, 2, 8), expected)
